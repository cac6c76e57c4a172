"""voicecore: a media runtime for AI phone agents.

Pure cores (protocols, rings, audio, wire messages, call logic) live here; the process shells live in
``workers/``. See ../shared/ARCHITECTURE.md for the design.
"""

__version__ = "0.1.0"
