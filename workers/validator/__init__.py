"""The validator worker: verdicts on gated responses' transcripts (core.py: rules; main.py: process)."""
