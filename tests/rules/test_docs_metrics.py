"""The metrics reference's file: the reader of HELP and TYPE lines that fills it, and the generator reading the
same file. That every family a real stack exports is in it is tests/stack/test_docs_metrics_stack.py's check.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from exposition import families_of

REPO = Path(__file__).resolve().parents[2]
FAMILIES_FILE = REPO / "docs" / "reference" / "metrics-families.json"


def test_families_of_reads_help_and_type():
    text = "# HELP voicecore_x_total a \\\\ b\n# TYPE voicecore_x_total counter\nvoicecore_x_total 3\n"
    assert families_of(text) == {"voicecore_x_total": {"help": "a \\ b", "type": "counter"}}


def test_the_generator_reads_the_same_file():
    spec = importlib.util.spec_from_file_location("docs_gen_reference", REPO / "docs" / "gen_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.METRICS_FAMILIES == FAMILIES_FILE
