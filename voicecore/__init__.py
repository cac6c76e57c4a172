"""voicecore: a media runtime for AI phone agents.

Pure cores (protocols, rings, audio, wire messages, call logic) live here; the process shells live in
``workers/``. The design is docs/explanation/architecture.md.
"""

__version__ = "0.1.0"
