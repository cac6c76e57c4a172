"""Agent tests: ``tests/*.toml`` in an agent directory, each a conversation of caller turns with expectations.

Owns the file format (reading and checking it: a bad file is an ``AgentTestError`` naming the file and the
key) and the judging of one turn's events (voicecore/chat/session.py ``ChatEvent``) against its
expectations, each failure a readable sentence. Running the conversations is the shell's business
(workers/chat/). The format (docs/how-to/talk-to-and-test-your-agent.md):

    name = "books a cleaning"          # optional; default: the file's name
    [[sim]]                             # the model simulator's rules (demo.toml's [[sim]]); default: demo.toml's
    when = "book a cleaning"
    call = "book_appointment"
    arguments = {service = "cleaning", date = "2026-12-01", time = "10:00"}
    then = "Your cleaning is booked."
    [tool_server]                       # the fake HTTP API the webhooks reach (demo.toml's); default: demo.toml's
    env = "RECEPTIONIST_API"
    routes = [{method = "POST", path = "/appointments", status = 201}]
    [[turn]]                            # a turn without `say` (only the first) judges the greeting
    say = "I'd like to book a cleaning"
    function = "book_appointment"       # called in this turn, with arguments holding these values
    arguments = {service = "cleaning"}
    confirmation = true                 # a confirmation asked (false: none asked)
    node = "booked"                     # the flow's node after the turn
    said = "booked"                     # a line said contains this (case-insensitive); a list: each
    said_regex = "book(ed)?"
    never_said = "guarantee"            # no line said contains this; a list: none of them
    never_said_regex = "\\d+ kr"
    ended = true                        # the call ended (hung up) in this turn; transferred = true: transferred
    max_latency_ms = 2000               # the caller's message -> the first line said
    numbers_grounded = true             # every number said in the turn is in the agent's knowledge or in a
                                        # tool's result of the conversation so far (the gate's value matching)
    rubric = "says the price per month" # a model judges the turn against it (voicecore/chat/rubric.py); a list:
                                        # each; without a model configured: skipped, never passed
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path
from typing import Any

from voicecore.chat.session import ChatEvent
from voicecore.validate.knowledge import KnowledgeBase
from voicecore.validate.numbers import extract_numbers
from voicecore.errors import MisuseError
from voicecore.sim.model import SimTurn
from voicecore.sim.tool_server import Route

TESTS_DIR = "tests"
TURN_KEYS = ("say", "function", "arguments", "confirmation", "node", "said", "said_regex", "never_said",
             "never_said_regex", "ended", "transferred", "max_latency_ms", "numbers_grounded", "rubric")
FILE_KEYS = ("name", "description", "sim", "tool_server", "turn")


class AgentTestError(MisuseError, ValueError):
    """A test file cannot be used (its author's fault, reported before anything runs)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TurnSpec:
    say: str | None
    expect: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class AgentTest:
    name: str
    file: str
    turns: tuple[TurnSpec, ...]
    rules: tuple[SimTurn, ...] | None  # None: the agent's demo.toml's
    routes: tuple[Route, ...] | None = None
    tool_server_env: str = ""


def _strings(value: Any, where: str) -> tuple[str, ...]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise AgentTestError(f"{where}: expected a non-empty string or a list of them")
    return tuple(values)


def _check_turn(raw: Any, where: str, first: bool) -> TurnSpec:
    if not isinstance(raw, dict):
        raise AgentTestError(f"{where}: expected a table")
    unknown = sorted(set(raw) - set(TURN_KEYS))
    if unknown:
        raise AgentTestError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(TURN_KEYS)})")
    say = raw.get("say")
    if say is None and not first:
        raise AgentTestError(f"{where}: `say` is required (only the first turn may judge the greeting alone)")
    if say is not None and (not isinstance(say, str) or not say.strip()):
        raise AgentTestError(f"{where}.say: expected a non-empty string")
    expect = {k: v for k, v in raw.items() if k != "say"}
    for key in ("function", "node"):
        if key in expect and not (isinstance(expect[key], str) and expect[key]):
            raise AgentTestError(f"{where}.{key}: expected a non-empty string")
    if "arguments" in expect and not isinstance(expect["arguments"], dict):
        raise AgentTestError(f"{where}.arguments: expected a table of the values the arguments must hold")
    if "arguments" in expect and "function" not in expect:
        raise AgentTestError(f"{where}.arguments: needs `function`")
    for key in ("confirmation", "ended", "transferred", "numbers_grounded"):
        if key in expect and not isinstance(expect[key], bool):
            raise AgentTestError(f"{where}.{key}: expected true or false")
    for key in ("said", "never_said", "said_regex", "never_said_regex", "rubric"):
        if key in expect:
            expect[key] = _strings(expect[key], f"{where}.{key}")
    for key in ("said_regex", "never_said_regex"):
        for pattern in expect.get(key, ()):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise AgentTestError(f"{where}.{key}: not a regular expression: {pattern!r} ({exc})") from None
    if "max_latency_ms" in expect:
        value = expect["max_latency_ms"]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise AgentTestError(f"{where}.max_latency_ms: expected a positive integer")
    return TurnSpec(say, expect)


def load_test(path: str | Path) -> AgentTest:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise AgentTestError(f"{path}: cannot read it: {exc}") from None
    unknown = sorted(set(data) - set(FILE_KEYS))
    if unknown:
        raise AgentTestError(f"{path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(FILE_KEYS)})")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name.strip():
        raise AgentTestError(f"{path}: name: expected a non-empty string")
    raw_turns = data.get("turn")
    if not isinstance(raw_turns, list) or not raw_turns:
        raise AgentTestError(f"{path}: needs at least one [[turn]]")
    turns = tuple(_check_turn(t, f"{path}: turn[{i}]", i == 0) for i, t in enumerate(raw_turns))
    rules = routes = None
    env = ""
    try:
        if "sim" in data:
            rules = tuple(SimTurn.from_dict(t) for t in data["sim"])
        if "tool_server" in data:
            server = data["tool_server"]
            env = server.get("env", "")
            routes = tuple(Route.from_dict(r) for r in server.get("routes", []))
    except (ValueError, TypeError, AttributeError) as exc:
        raise AgentTestError(f"{path}: {exc}") from None
    return AgentTest(name.strip(), str(path), turns, rules, routes, env)


def find_tests(agent_dir: str | Path) -> list[Path]:
    return sorted((Path(agent_dir) / TESTS_DIR).glob("*.toml"))


# ------------------------------------------------------------------------------------------ judging
def _holds(actual: Any, expected: Any) -> bool:
    """``actual`` holds ``expected``: equal, or for tables every expected key holds (case-insensitive text)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and _holds(actual[k], v) for k, v in expected.items())
    if isinstance(expected, str) and isinstance(actual, str):
        return actual.casefold() == expected.casefold()
    return actual == expected


@dataclasses.dataclass
class Grounds:
    """What the agent's numbers may come from in a conversation: its knowledge and the results its tools gave so
    far. The shell makes one per conversation and ``note``s each turn's events before judging the turn."""

    knowledge: KnowledgeBase | None
    language: str = "auto"  # how numbers are read (AgentSpec.gate_language)
    tool_results: list[str] = dataclasses.field(default_factory=list)
    _results_base: KnowledgeBase | None = None

    def note(self, events: list[ChatEvent]) -> None:
        outputs = [str(e.data.get("output", "")) for e in events if e.kind == "tool_result" and e.data.get("output")]
        if outputs:
            self.tool_results += outputs
            self._results_base = None

    def ungrounded(self, lines: list[str]) -> list[tuple[str, str]]:
        """(the number as said, its line) for each number of ``lines`` that neither the knowledge nor a tool's
        result holds: the value alone, as the gate matches numbers (voicecore/validate/knowledge.py ``holds``)."""
        if self._results_base is None and self.tool_results:
            self._results_base = KnowledgeBase.from_documents(
                {f"tool result {n}": text for n, text in enumerate(self.tool_results, start=1)})
        bases = [base for base in (self.knowledge, self._results_base) if base is not None]
        return [(mention.raw, line) for line in lines for mention in extract_numbers(line, self.language)  # type: ignore[arg-type]
                if not any(base.holds(mention) for base in bases)]


def judge_turn(expect: dict[str, Any], events: list[ChatEvent], node: str, latency_ms: int | None,
               grounds: Grounds | None = None) -> list[str]:
    """The failures of one turn: each a sentence saying what was expected and what happened. ``grounds``: for
    ``numbers_grounded``, with this turn's events noted."""
    failures: list[str] = []
    said = [e.text for e in events if e.kind == "said"]
    calls = [e.data for e in events if e.kind == "function_call"]
    if "function" in expect:
        name = expect["function"]
        named = [c for c in calls if c.get("name") == name]
        if not named:
            got = ", ".join(str(c.get("name")) for c in calls) or "none"
            failures.append(f"expected a call of {name}; functions called: {got}")
        elif "arguments" in expect and not any(_holds(c.get("arguments"), expect["arguments"]) for c in named):
            failures.append(f"expected {name} called with arguments holding {json.dumps(expect['arguments'], ensure_ascii=False)}; "
                            f"got {', '.join(json.dumps(c.get('arguments'), ensure_ascii=False) for c in named)}")
    if "confirmation" in expect:
        asked = [e.data.get("name") for e in events if e.kind == "confirmation"]
        if expect["confirmation"] and not asked:
            failures.append("expected a confirmation to be asked; none was")
        elif not expect["confirmation"] and asked:
            failures.append(f"expected no confirmation; one was asked for {', '.join(asked)}")
    if "node" in expect and node != expect["node"]:
        failures.append(f"expected the flow at node {expect['node']!r}; it is at {node!r}")
    text = "\n".join(said)
    for phrase in expect.get("said", ()):
        if phrase.casefold() not in text.casefold():
            failures.append(f"expected a line containing {phrase!r}; said: {_quoted(said)}")
    for pattern in expect.get("said_regex", ()):
        if not any(re.search(pattern, line) for line in said):
            failures.append(f"expected a line matching /{pattern}/; said: {_quoted(said)}")
    for phrase in expect.get("never_said", ()):
        hits = [line for line in said if phrase.casefold() in line.casefold()]
        if hits:
            failures.append(f"expected no line containing {phrase!r}; said: {_quoted(hits)}")
    for pattern in expect.get("never_said_regex", ()):
        hits = [line for line in said if re.search(pattern, line)]
        if hits:
            failures.append(f"expected no line matching /{pattern}/; said: {_quoted(hits)}")
    ended = any(e.kind == "ended" for e in events)
    transferred = [e.text for e in events if e.kind == "transferred"]
    if "ended" in expect and expect["ended"] != ended:
        failures.append("expected the call to end" if expect["ended"] else "expected the call to go on; it ended")
    if "transferred" in expect and expect["transferred"] != bool(transferred):
        failures.append("expected the call to be transferred; it was not" if expect["transferred"]
                        else f"expected no transfer; it was transferred to {transferred[0]}")
    if expect.get("numbers_grounded"):
        missing = (grounds or Grounds(None)).ungrounded(said)
        if missing:
            where = "knowledge" if grounds is not None and grounds.knowledge is not None else "knowledge (it has none)"
            failures.append(f"expected every number said to be in the agent's {where} or a tool's result; not there: "
                            + ", ".join(f"{raw!r} in {line!r}" for raw, line in missing))
    if "max_latency_ms" in expect:
        if latency_ms is None:
            failures.append(f"expected a line within {expect['max_latency_ms']} ms; the agent said nothing")
        elif latency_ms > expect["max_latency_ms"]:
            failures.append(f"expected the first line within {expect['max_latency_ms']} ms; it took {latency_ms} ms")
    return failures


def _quoted(lines: list[str]) -> str:
    return " | ".join(repr(line) for line in lines) if lines else "nothing"


def expectation_count(test: AgentTest) -> int:
    """Each key of each turn, each rubric of a list one."""
    return sum(len(turn.expect) - ("rubric" in turn.expect) + len(rubrics(turn.expect)) for turn in test.turns)


def rubrics(expect: dict[str, Any]) -> tuple[str, ...]:
    """The turn's rubric expectations (judged by the shell with a model, not by ``judge_turn``)."""
    return tuple(expect.get("rubric", ()))
