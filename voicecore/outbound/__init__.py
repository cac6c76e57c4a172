"""Outbound calling: who answered (answer.py: a person, a voicemail, a screening assistant, an IVR) and
campaigns (campaign*.py: the file, the rules, the scheduler and its state in the store)."""
