"""Microbenchmarks of the per-message and per-frame costs the docs quote (pytest-benchmark; see conftest.py)."""
