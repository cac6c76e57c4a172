"""The recorder worker: fills the call store from finished call records, keeps retention, cleans leftovers
(core.py: decisions; main.py: process)."""
