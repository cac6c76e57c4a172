"""Microbenchmarks of the per-message and per-frame costs the README quotes (pytest-benchmark; see conftest.py)."""
