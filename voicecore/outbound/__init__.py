"""Outbound calling: placing calls, telling who answered, and running campaigns."""
