"""Log lines: the human one-liner by default, one JSON object per line with VOICECORE_LOG_FORMAT=json."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

from voicecore.logs import JsonFormatter


def record(message: str, *args, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("voicecore.model", logging.WARNING, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_a_json_line_names_the_call_and_keeps_caller_data_in_its_own_key():
    line = json.loads(JsonFormatter("model").format(record("call %s: response tag %d rejected (%s)", "CA" + "a" * 32, 4,
                                                           "numbers", reason="a number is not in the knowledge base")))
    assert line["process"] == "model" and line["level"] == "warning" and line["logger"] == "voicecore.model"
    assert line["call"] == "CA" + "a" * 32 and line["message"].startswith("call CA")
    assert line["fields"] == {"reason": "a number is not in the knowledge base"}  # the redactable part
    assert "T" in line["time"] and isinstance(line["pid"], int)


def test_a_line_without_a_call_has_no_call_key_and_exceptions_are_kept():
    try:
        raise ValueError("boom")
    except ValueError:
        rec = record("worker stopping")
        rec.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter("pacer").format(rec))
    assert "call" not in line and "fields" not in line and "ValueError: boom" in line["exception"]


def test_setup_logging_json_writes_one_object_per_line():
    code = ("from voicecore.logs import setup_logging; import logging; setup_logging('gateway', 'info', 'json'); "
            "logging.getLogger('voicecore.gateway').info('call %s: ended (stop)', 'CA' + '1' * 32)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    (line,) = done.stderr.strip().splitlines()
    assert json.loads(line)["call"] == "CA" + "1" * 32
