"""An agent's demo scenario (``demo.toml`` in its directory): what the simulated callers say and press, what
the simulated model does on each caller turn, and the routes of the fake tool server.

Owns reading and checking that file into plain data (a bad file is a ``ScenarioError`` naming the file and
key). The simulators and the demo run it (voicecore/demo.py); the agent itself never reads it: it is the
world the agent is tried against, not part of the agent.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from voicecore.errors import MisuseError
from voicecore.sim.audio_clips import default_library, load_clip
from voicecore.sim.carrier import CallScript
from voicecore.sim.model import SimTurn
from voicecore.sim.tool_server import Route

SCENARIO_FILE = "demo.toml"
DTMF_DIGITS = frozenset("0123456789*#")


class ScenarioError(MisuseError, ValueError):
    """The demo scenario cannot be used (the agent's author's fault, reported before anything starts)."""


@dataclasses.dataclass(frozen=True, slots=True)
class CallerTurn:
    at_ms: int
    clip: str = ""  # a caller clip's name (voicecore/sim/clips)
    dtmf: str = ""  # or a keypad digit


@dataclasses.dataclass(frozen=True, slots=True)
class CallerScript:
    seconds: float
    turns: tuple[CallerTurn, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    scripts: tuple[CallerScript, ...]
    sim_turns: tuple[SimTurn, ...]
    routes: tuple[Route, ...] = ()
    tool_server_env: str = ""  # the environment variable that gets the fake tool server's base URL

    def script_for(self, call_index: int) -> CallerScript:
        return self.scripts[call_index % len(self.scripts)]

    def call_script(self, call_index: int, duration_ms: int) -> CallScript:
        """Call ``call_index``'s caller, for the carrier simulator (turns after the call's end dropped)."""
        turns = [t for t in self.script_for(call_index).turns if t.at_ms < duration_ms]
        return CallScript(duration_ms=duration_ms,
                          utterances=tuple((t.at_ms, load_clip(t.clip)) for t in turns if t.clip),
                          dtmf=tuple((t.at_ms, t.dtmf) for t in turns if t.dtmf), bargein_at_ms=())


def load_scenario(agent_dir: str | Path) -> Scenario:
    path = Path(agent_dir) / SCENARIO_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no demo scenario (the demo needs one: callers' turns and the model's rules)") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    return parse_scenario(data, str(path))


def parse_scenario(data: dict[str, Any], source: str) -> Scenario:
    problems: list[str] = []
    unknown = sorted(set(data) - {"call", "sim", "tool_server"})
    if unknown:
        problems.append(f"unknown keys {unknown}")
    clips = {c.name for c in default_library().infos if c.role == "caller"}
    scripts: list[CallerScript] = []
    for i, call in enumerate(data.get("call", [])):
        where = f"call[{i}]"
        seconds = call.get("seconds")
        if not isinstance(seconds, (int, float)) or seconds <= 0:
            problems.append(f"{where}.seconds: expected a positive number")
            continue
        turns: list[CallerTurn] = []
        for j, turn in enumerate(call.get("turns", [])):
            at = turn.get("at_s")
            say, dtmf = turn.get("say", ""), turn.get("dtmf", "")
            if not isinstance(at, (int, float)) or not 0 <= at < seconds:
                problems.append(f"{where}.turns[{j}].at_s: expected a time within the call's {seconds} s")
            elif bool(say) == bool(dtmf):
                problems.append(f"{where}.turns[{j}]: expected one of say (a caller clip) or dtmf (a digit)")
            elif say and say not in clips:
                problems.append(f"{where}.turns[{j}].say: no caller clip named {say!r}")
            elif dtmf and (len(dtmf) != 1 or dtmf not in DTMF_DIGITS):
                problems.append(f"{where}.turns[{j}].dtmf: expected one of 0-9 * #")
            else:
                turns.append(CallerTurn(int(at * 1000), say, dtmf))
        scripts.append(CallerScript(float(seconds), tuple(sorted(turns, key=lambda t: t.at_ms))))
    if not scripts and "call" in data:
        problems.append("call: no usable caller script")
    sim_turns: list[SimTurn] = []
    for i, rule in enumerate(data.get("sim", [])):
        try:
            sim_turns.append(SimTurn.from_dict(rule))
        except (TypeError, ValueError) as exc:
            problems.append(f"sim[{i}]: {exc}")
    server = data.get("tool_server", {})
    routes: list[Route] = []
    for i, route in enumerate(server.get("routes", [])):
        try:
            routes.append(Route.from_dict(route))
        except (TypeError, ValueError) as exc:
            problems.append(f"tool_server.routes[{i}]: {exc}")
    env = server.get("env", "")
    if routes and not (isinstance(env, str) and env.isidentifier()):
        problems.append("tool_server.env: expected the name of the environment variable the agent's URLs read")
    if problems:
        raise ScenarioError(f"{source}: " + "; ".join(problems))
    if not scripts:
        raise ScenarioError(f"{source}: at least one [[call]] script is needed")
    return Scenario(tuple(scripts), tuple(sim_turns), tuple(routes), env if routes else "")
