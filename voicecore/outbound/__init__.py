"""Outbound calls: who answered (a person, a voicemail, a screening assistant, an IVR)."""
