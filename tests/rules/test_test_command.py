"""The README's test command is the one CI runs: .ci/run holds it as one of its lines, as it is written in the
README, and the contributors' page on running the tests shows the same command."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def readme_test_command() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^Run the tests\b.*?\n```sh\n(.+?)\n```", readme, flags=re.M | re.S)
    assert found, "README.md: no ```sh block after the line starting 'Run the tests'"
    (command,) = found[1].splitlines()
    return command


def test_ci_runs_the_readme_test_command_as_written():
    command = readme_test_command()
    assert command in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def test_the_command_runs_every_tier_and_reports_the_slowest():
    command = readme_test_command()
    assert re.search(r"pytest -q tests --durations=\d+$", command), command


def test_the_contributors_page_shows_the_same_command():
    page = (REPO / "docs" / "how-to" / "run-the-tests.md").read_text(encoding="utf-8")
    assert readme_test_command() in page.splitlines()
