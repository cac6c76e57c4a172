"""Reading a campaign file (a CSV of callees) and a do-not-call file, refusing any bad row.

Owns their formats and the problems they report. Every row is checked and every problem is listed with its
row number (the header is row 1, as a spreadsheet numbers them), so one run shows all that is wrong; a file
with any problem gives no callees at all, and nothing is dialled.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
from collections.abc import Iterable
from pathlib import Path

import phonenumbers

from voicecore.outbound.campaign_rules import CallingWindow, RulesError, zone, zones_of_number

NUMBER_COLUMN = "number"
TIMEZONE_COLUMN = "timezone"
# A placeholder an agent's text can hold: {name}. Narrower than any brace, so JSON in instructions is no field.
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclasses.dataclass(frozen=True, slots=True)
class CampaignProblem:
    """One thing wrong with a row (or the header) of a file. ``code`` is a stable kebab-case id."""

    file: str
    row: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: row {self.row}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "row": self.row, "code": self.code, "message": self.message}


class CampaignFileError(ValueError):
    """The file has problems (all of them are in ``problems``); no callee was read."""

    def __init__(self, problems: list[CampaignProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclasses.dataclass(frozen=True, slots=True)
class Callee:
    """One row of a campaign file: its number in E.164, the zones its window is read in, its fields."""

    row: int
    number: str
    zones: tuple[str, ...]  # one when the file names it; several when the number's region spans zones
    fields: dict[str, str]


def agent_placeholders(spec: object) -> set[str]:
    """The ``{name}`` placeholders an agent's texts use (instructions, greeting, each node's messages and
    prompt): the fields every callee of its campaign must have."""
    texts = [getattr(spec, "instructions", ""), getattr(spec, "greeting", "")]
    flow = getattr(spec, "flow", None)
    for node in (getattr(flow, "nodes", {}) or {}).values():
        texts += [m.content for m in (*node.role_messages, *node.task_messages)]
        texts.append(node.say)
    return {name for text in texts if text for name in PLACEHOLDER.findall(text)}


def normalise_number(raw: str, default_region: str | None = None) -> str:
    """``raw`` in E.164; ValueError saying why when it is not a valid phone number."""
    try:
        parsed = phonenumbers.parse(raw, default_region)
    except phonenumbers.NumberParseException as exc:
        raise ValueError(_parse_reason(exc)) from None
    if not phonenumbers.is_valid_number(parsed):
        raise ValueError("no such number in its country's numbering plan")
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def _parse_reason(exc: phonenumbers.NumberParseException) -> str:
    if exc.error_type == phonenumbers.NumberParseException.INVALID_COUNTRY_CODE:
        return "no country code (write it as +<country code><number>)"
    return {phonenumbers.NumberParseException.NOT_A_NUMBER: "not a phone number",
            phonenumbers.NumberParseException.TOO_SHORT_NSN: "too short",
            phonenumbers.NumberParseException.TOO_SHORT_AFTER_IDD: "too short",
            phonenumbers.NumberParseException.TOO_LONG: "too long"}.get(exc.error_type, str(exc))


def parse_campaign(text: str, file: str = "campaign.csv", required_fields: Iterable[str] = (),
                   window: CallingWindow | None = None, default_region: str | None = None) -> list[Callee]:
    """The callees of a campaign file's ``text``; CampaignFileError listing every problem when any row is bad.

    ``required_fields``: the columns the agent's texts use (agent_placeholders); each row must give them a
    value. ``window``: when given, a number whose possible zones never share an open window is refused (it
    could never be called)."""
    problems: list[CampaignProblem] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [h.strip() for h in next(reader, [])]
    if NUMBER_COLUMN not in header:
        problems.append(CampaignProblem(file, 1, "no-number-column", f"the header has no {NUMBER_COLUMN!r} column "
                                        f"(it has: {', '.join(repr(h) for h in header) or 'nothing'})"))
        raise CampaignFileError(problems)
    required = sorted(set(required_fields) - {NUMBER_COLUMN})
    missing_columns = [f for f in required if f not in header]
    for name in missing_columns:
        problems.append(CampaignProblem(file, 1, "missing-column",
                                        f"no {name!r} column: the agent's instructions use {{{name}}}"))
    for name in sorted({h for h in header if header.count(h) > 1}):
        problems.append(CampaignProblem(file, 1, "duplicate-column", f"the column {name!r} appears more than once"))
    callees: list[Callee] = []
    first_row: dict[str, int] = {}
    for index, cells in enumerate(reader):
        row = index + 2
        if not any(c.strip() for c in cells):
            continue  # a blank line (a spreadsheet's trailing rows) is no callee
        if len(cells) > len(header):
            problems.append(CampaignProblem(file, row, "extra-cells",
                                            f"{len(cells)} cells, the header names {len(header)}"))
            continue
        values = {h: (cells[i].strip() if i < len(cells) else "") for i, h in enumerate(header)}
        raw = values[NUMBER_COLUMN]
        row_problems = len(problems)
        number = ""
        parsed = None
        try:
            number = normalise_number(raw, default_region) if raw else ""
            parsed = phonenumbers.parse(number) if number else None
        except ValueError as exc:
            problems.append(CampaignProblem(file, row, "bad-number", f"number {raw!r}: {exc}"))
        if not raw:
            problems.append(CampaignProblem(file, row, "no-number", "the number is empty"))
        if number in first_row:
            problems.append(CampaignProblem(file, row, "duplicate-number",
                                            f"{number} is also on row {first_row[number]}"))
        elif number:
            first_row[number] = row
        for name in required:
            if name not in missing_columns and not values[name]:
                problems.append(CampaignProblem(file, row, "missing-field",
                                                f"{name!r} is empty: the agent's instructions use {{{name}}}"))
        zones: tuple[str, ...] = ()
        explicit = values.get(TIMEZONE_COLUMN, "")
        if explicit:
            try:
                zone(explicit)
                zones = (explicit,)
            except RulesError as exc:
                problems.append(CampaignProblem(file, row, "bad-timezone", f"timezone: {exc}"))
        elif parsed is not None:
            zones = zones_of_number(parsed)
            if not zones:
                problems.append(CampaignProblem(file, row, "unknown-timezone",
                                                f"the time zone of {number} cannot be told from the number: "
                                                f"give it in a {TIMEZONE_COLUMN!r} column"))
            elif window is not None and window.next_open(0.0, zones) is None:
                problems.append(CampaignProblem(
                    file, row, "no-common-window",
                    f"{number} may be in any of {len(zones)} time zones ({', '.join(zones[:3])}, ...) whose calling "
                    f"windows never overlap: give its zone in a {TIMEZONE_COLUMN!r} column"))
        if len(problems) == row_problems:
            fields = {h: v for h, v in values.items() if h not in (NUMBER_COLUMN, TIMEZONE_COLUMN)}
            callees.append(Callee(row=row, number=number, zones=zones, fields=fields))
    if not callees and not problems:
        problems.append(CampaignProblem(file, 1, "no-callees", "the file has a header and no callee"))
    if problems:
        raise CampaignFileError(problems)
    return callees


def read_campaign(path: str | Path, **kwargs: object) -> list[Callee]:
    """parse_campaign on a file (UTF-8, a leading byte order mark allowed, as spreadsheets write it)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise CampaignFileError([CampaignProblem(str(path), 0, "unreadable-file", f"cannot read it: {exc}")]) from None
    return parse_campaign(text, file=path.name, **kwargs)  # type: ignore[arg-type]


def parse_do_not_call(text: str, file: str = "do-not-call.txt", default_region: str | None = None) -> set[str]:
    """The numbers of a do-not-call file in E.164: one number a line, in any format the numbering plan
    reads; blank lines and lines starting with # are skipped. A line that is no number is a problem (a typo
    must not silently let a number be called): CampaignFileError listing each."""
    numbers: set[str] = set()
    problems: list[CampaignProblem] = []
    for index, line in enumerate(text.splitlines()):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        try:
            numbers.add(normalise_number(entry, default_region))
        except ValueError as exc:
            problems.append(CampaignProblem(file, index + 1, "bad-number", f"{entry!r}: {exc}"))
    if problems:
        raise CampaignFileError(problems)
    return numbers
