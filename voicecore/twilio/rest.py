"""Kept for one release: moved to voicecore/carriers/twilio/rest.py."""

from voicecore.carriers.twilio.rest import *  # noqa: F403
