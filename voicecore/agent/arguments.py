"""A function call's arguments against the function's JSON Schema, the pure part both sides share.

Owns the check (jsonschema, with its format checker: a ``"format": "date"`` is a date, not any string;
"time" and "date-time" by our own rules, below) and
its one-line reason. The flow (voicecore/agent/flow.py) refuses an invalid call before a confirmation is
proposed; the tool runner (voicecore/agent/tools.py) before anything is sent. No I/O.
"""

from __future__ import annotations

import datetime
import json
import re
from functools import lru_cache
from typing import Any

import jsonschema

FORMATS = jsonschema.FormatChecker()
_TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:[Zz]|[+-](?:[01]\d|2[0-3]):?[0-5]\d)?$")


# "time" and "date-time" are checked here, the same whatever optional packages jsonschema finds (without
# rfc3339-validator it checks neither, with it it wants seconds and an offset). A booking's time is
# "10:00": seconds and offset may be left out; a date-time is what datetime.fromisoformat reads.
@FORMATS.checks("time", raises=ValueError)
def _is_time(instance: object) -> bool:
    return not isinstance(instance, str) or bool(_TIME.match(instance))


@FORMATS.checks("date-time", raises=ValueError)
def _is_date_time(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    if not re.match(r"^\d{4}-\d{2}-\d{2}[Tt ]", instance):
        return False
    datetime.datetime.fromisoformat(instance.replace("z", "Z").replace("Z", "+00:00"))
    return True


def reject_constant(name: str) -> Any:
    """json.loads parse_constant: NaN and Infinity are not JSON."""
    raise ValueError(f"{name} is not JSON")


@lru_cache(maxsize=256)
def _validator_for(schema_text: str) -> Any:
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=FORMATS)


def check_arguments(parameters: dict[str, Any], arguments: str) -> tuple[dict[str, Any] | None, str]:
    """(the arguments object, "") when ``arguments`` is a JSON object valid against ``parameters``; else
    (None, why), the reason safe to show the model (where in the arguments, what is wrong)."""
    try:
        value = json.loads(arguments or "{}", parse_constant=reject_constant)
    except ValueError as exc:
        return None, f"the arguments are not JSON: {exc}"
    if not isinstance(value, dict):
        return None, "the arguments must be a JSON object"
    try:
        validator = _validator_for(json.dumps(parameters, sort_keys=True))
    except jsonschema.SchemaError as exc:  # the loader checks schemas; an agent from an old record may not pass
        return None, f"the function's parameters are not a valid schema: {exc.message}"
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path)
        return None, f"{where}: {error.message}" if where else error.message
    return value, ""
