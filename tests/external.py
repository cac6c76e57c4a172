"""What a test needs from outside the repository (test vectors, /dev/shm, a browser, a server binary)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """CI runs the suite with CI=true (GitHub Actions, GitLab and most others set it); "1" counts too."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def missing_resource(what: str, looked_in: str | Path, how_to_get_it: str = "") -> NoReturn:
    """Something a test needs from outside the repository is absent (test vectors, /dev/shm, ...).

    Outside CI the test is skipped with the reason. Under CI it fails: CI is set up to have it, and a test
    that quietly skips there reports a pass it never earned. Call it from the test or from the fixture
    that loads the thing (a fixture's failure shows as an error at setup: just as red).
    """
    message = f"{what} not found: looked in {looked_in}" + (f" ({how_to_get_it})" if how_to_get_it else "")
    if in_ci():
        pytest.fail(f"{message}. CI={os.environ.get('CI')!r}: CI must provide it, so this fails instead of skipping.",
                    pytrace=False)
    pytest.skip(message)
