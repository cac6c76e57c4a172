"""A strict reader of Prometheus exposition text (format 0.0.4), written from the spec
(https://prometheus.io/docs/instrumenting/exposition_formats/): every line is a HELP, a TYPE or a sample
`name{label="value",...} value`; names and label names match the spec's patterns, label values use only
the three escapes, values are Go floats, each family has one HELP and one TYPE before its samples, its
samples are contiguous, and no series appears twice. Histograms are checked further by histogram_series.

tests/unit/test_metrics_text.py pins the reader itself; the stack tests read real /metrics scrapes with it.
"""

from __future__ import annotations

import math
import re

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
GO_FLOAT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN")
TYPES = {"counter", "gauge", "summary", "histogram", "untyped"}


class ExpositionError(AssertionError):
    pass


def _unescape(text: str, allowed: dict[str, str]) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            if i + 1 >= len(text) or text[i + 1] not in allowed:
                raise ExpositionError(f"bad escape in {text!r}")
            out.append(allowed[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _parse_labels(text: str, line: str) -> dict[str, str]:
    """`a="x",b="y"` (the part between the braces) -> dict, strictly."""
    labels: dict[str, str] = {}
    i = 0
    while i < len(text):
        match = LABEL_NAME.match(text, i)
        if not match or text[match.end():match.end() + 2] != '="':
            raise ExpositionError(f"bad label in {line!r}")
        name, i = match.group(), match.end() + 2
        raw = []
        while True:
            if i >= len(text):
                raise ExpositionError(f"unterminated label value in {line!r}")
            if text[i] == "\\":
                raw.append(text[i:i + 2])
                i += 2
                continue
            if text[i] == '"':
                break
            if text[i] == "\n":
                raise ExpositionError(f"raw line feed in a label value: {line!r}")
            raw.append(text[i])
            i += 1
        i += 1
        if name in labels:
            raise ExpositionError(f"label {name} twice in {line!r}")
        labels[name] = _unescape("".join(raw), {"\\": "\\", '"': '"', "n": "\n"})
        if i < len(text):
            if text[i] != ",":
                raise ExpositionError(f"expected , between labels in {line!r}")
            i += 1
    return labels


def parse_exposition(text: str) -> dict[str, dict]:
    """Families by name: {"type", "help", "samples": {(sample_name, sorted labels): float}}. Raises
    ExpositionError on anything the 0.0.4 text format does not allow (and on blank lines, which we never
    write)."""
    if text and not text.endswith("\n"):
        raise ExpositionError("the last line must end with a line feed")
    families: dict[str, dict] = {}
    current: str | None = None
    finished: set[str] = set()
    for line in text.split("\n")[:-1] if text else []:
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not METRIC_NAME.fullmatch(name):
                    raise ExpositionError(f"bad metric name in {line!r}")
                if name in finished or (current is not None and current != name and name in families):
                    raise ExpositionError(f"family {name} is not contiguous")
                if current is not None and current != name:
                    finished.add(current)
                family = families.setdefault(name, {"type": None, "help": None, "samples": {}})
                current = name
                if family["samples"]:
                    raise ExpositionError(f"{parts[1]} after samples of {name}")
                if parts[1] == "HELP":
                    if family["help"] is not None:
                        raise ExpositionError(f"second HELP for {name}")
                    family["help"] = _unescape(parts[3] if len(parts) > 3 else "", {"\\": "\\", "n": "\n"})
                else:
                    if family["type"] is not None:
                        raise ExpositionError(f"second TYPE for {name}")
                    if len(parts) != 4 or parts[3] not in TYPES:
                        raise ExpositionError(f"bad TYPE line {line!r}")
                    family["type"] = parts[3]
            continue  # any other comment
        if not line:
            raise ExpositionError("blank line")
        match = METRIC_NAME.match(line)
        if not match:
            raise ExpositionError(f"bad sample line {line!r}")
        sample_name, rest = match.group(), line[match.end():]
        labels: dict[str, str] = {}
        if rest.startswith("{"):
            end = _closing_brace(rest, line)
            labels = _parse_labels(rest[1:end], line)
            rest = rest[end + 1:]
        fields = rest.split(" ")
        if len(fields) not in (2, 3) or fields[0] != "" or not GO_FLOAT.fullmatch(fields[1]):
            raise ExpositionError(f"bad value in {line!r}")
        if len(fields) == 3 and not re.fullmatch(r"-?\d+", fields[2]):
            raise ExpositionError(f"bad timestamp in {line!r}")
        family_name = _family_of(sample_name, families)
        if family_name != current:
            raise ExpositionError(f"sample {sample_name} outside its family's block")
        family = families[family_name]
        if family["type"] is None:
            raise ExpositionError(f"sample {sample_name} before its TYPE")
        key = (sample_name, tuple(sorted(labels.items())))
        if key in family["samples"]:
            raise ExpositionError(f"series twice: {line!r}")
        family["samples"][key] = float(fields[1].replace("Inf", "inf").replace("NaN", "nan"))
    return families


def _closing_brace(rest: str, line: str) -> int:
    in_value, i = False, 1
    while i < len(rest):
        c = rest[i]
        if in_value and c == "\\":
            i += 2
            continue
        if c == '"':
            in_value = not in_value
        elif c == "}" and not in_value:
            return i
        i += 1
    raise ExpositionError(f"no closing brace in {line!r}")


def _family_of(sample_name: str, families: dict) -> str:
    if sample_name in families:
        return sample_name
    for suffix in ("_sum", "_count", "_bucket"):
        base = sample_name.removesuffix(suffix)
        if base != sample_name and base in families and families[base]["type"] in ("summary", "histogram"):
            return base
    raise ExpositionError(f"sample {sample_name} has no TYPE")


def value(families: dict, name: str, **labels: str) -> float:
    return families[name]["samples"][(name, tuple(sorted(labels.items())))]


def histogram_series(families: dict, name: str) -> dict[tuple, dict]:
    """A histogram family's series by label set (without `le`): {"buckets": [(le, count), ...] in the
    order written, "sum", "count"}. Asserts what the format requires of each: buckets in increasing `le`,
    counts that do not decrease, a `+Inf` bucket last equal to `_count`, and a `_sum`."""
    family = families[name]
    assert family["type"] == "histogram", name
    series: dict[tuple, dict] = {}
    for (sample, labels), number in family["samples"].items():
        plain = tuple(label for label in labels if label[0] != "le")
        parts = series.setdefault(plain, {"buckets": []})
        if sample == name + "_bucket":
            parts["buckets"].append((float(dict(labels)["le"].replace("Inf", "inf")), number))
        else:
            assert sample in (name + "_sum", name + "_count"), sample
            parts[sample.removeprefix(name + "_")] = number
    assert series, name
    for labels, parts in series.items():
        bounds = [bound for bound, _ in parts["buckets"]]
        counts = [count for _, count in parts["buckets"]]
        assert bounds == sorted(set(bounds)) and bounds[-1] == math.inf, (name, labels, bounds)
        assert counts == sorted(counts), (name, labels, counts)
        assert counts[-1] == parts["count"] and "sum" in parts, (name, labels, parts)
    return series


def families_of(text: str) -> dict[str, dict[str, str]]:
    """name -> {"type", "help"} from exposition text (0.0.4: `# HELP name text`, `# TYPE name type`)."""
    families: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP "):].partition(" ")
            families.setdefault(name, {})["help"] = help_text.replace("\\n", "\n").replace("\\\\", "\\")
        elif line.startswith("# TYPE "):
            name, _, kind = line[len("# TYPE "):].partition(" ")
            families.setdefault(name, {})["type"] = kind
    return families
