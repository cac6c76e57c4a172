"""Kept for one release: moved to voicecore/carriers/twilio/stream.py."""

from voicecore.carriers.twilio.stream import *  # noqa: F403
from voicecore.carriers.twilio.stream import __all__  # noqa: F401
