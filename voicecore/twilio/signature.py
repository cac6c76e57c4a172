"""Kept for one release: moved to voicecore/carriers/twilio/signature.py."""

from voicecore.carriers.twilio.signature import *  # noqa: F403
