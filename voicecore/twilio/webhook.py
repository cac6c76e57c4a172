"""Kept for one release: moved to voicecore/carriers/twilio/webhook.py; the session tokens it also held are
voicecore/carriers/session_tokens.py's."""

from voicecore.carriers.session_tokens import *  # noqa: F403
from voicecore.carriers.twilio.webhook import *  # noqa: F403
