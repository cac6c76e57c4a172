"""Live observation of calls: the events observers see (events.py)."""
