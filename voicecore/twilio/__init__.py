"""Kept for one release: Twilio is one carrier among the others now, voicecore/carriers/twilio/ (its stream,
webhook, signature and REST modules) with the mark naming rule in voicecore/carriers/marks.py. These modules only
re-export those names for code outside this repository that still imports ``voicecore.twilio.*``."""
