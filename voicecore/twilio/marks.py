"""Kept for one release: the mark naming rule is every carrier's now, voicecore/carriers/marks.py."""

from voicecore.carriers.marks import *  # noqa: F403
from voicecore.carriers.marks import __all__  # noqa: F401
