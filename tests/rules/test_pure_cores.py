"""The sans-I/O cores import no I/O, clock or randomness; time and ids come in as arguments
(docs/explanation/style.md#rules).

Which modules are pure is decided by convention, not by a hand-kept list, so a new core is checked the
day it is written:

- every ``core.py`` or ``*_core.py`` under voicecore/ and workers/ (a worker's step function, a
  simulator's core);
- every module of the packages that hold wire formats, call logic and validation: voicecore/carriers/ (every
  carrier's package and their shared base), voicecore/twilio/, voicecore/realtime/, voicecore/bus/,
  voicecore/validate/, voicecore/call/, voicecore/sim/model/, voicecore/observe/;
  in these packages a module named ``transport.py`` is the package's I/O shell and is not pure;
- the shared constants and arithmetic: voicecore/timing.py, voicecore/stats.py, voicecore/shm/control.py;
- an agent as data and its flow: voicecore/agent/{spec,actions,arguments,flow,settings}.py;
- who answered an outbound call, and a campaign's rules and scheduler: voicecore/outbound/{answer,beep,speech,
  phrases,greetings,campaign_rules,campaign}.py (the campaign's file reader, store and demo are their shells).

A module of those packages that does I/O on purpose is named in ``IO_ALLOWED`` with the imports it may
use and why; everything else about it is still checked. ``MIN_PURE_MODULES`` is a floor: a glob that
silently stops matching (a package renamed, a folder moved) fails the count instead of passing.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PURE_PACKAGES = (
    # the carriers: their events, wire templates, codec and edge, the descriptor and registry, and one package
    # per carrier (stream protocol, encoder, carrier side, answer document, signatures, REST requests)
    "voicecore/carriers",
    "voicecore/twilio",
    "voicecore/realtime",
    "voicecore/gemini",  # the Gemini Live wire codec
    "voicecore/bus",
    "voicecore/validate",
    "voicecore/call",
    "voicecore/sim/model",
    "voicecore/observe",  # a call's observer events from its record entries, and their numbering
)
PURE_FILES = ("voicecore/timing.py", "voicecore/stats.py", "voicecore/shm/control.py",
              # an agent as data and the flow that runs it (loading files and running tools are their shells)
              "voicecore/agent/spec.py", "voicecore/agent/actions.py", "voicecore/agent/arguments.py",
              "voicecore/agent/flow.py", "voicecore/agent/settings.py",
              # a call record summarized for the call store (the database is its shell)
              "voicecore/store/summary.py",
              # signed stream tokens any node verifies, their per-node redeemed cache, the shared store's verdicts
              "voicecore/stream_tokens.py",
              # who answered an outbound call: the detector, its beep filters, speech segments, phrases, greetings
              "voicecore/outbound/answer.py", "voicecore/outbound/beep.py", "voicecore/outbound/speech.py",
              "voicecore/outbound/phrases.py", "voicecore/outbound/greetings.py", "voicecore/outbound/opt_out.py",
              # a campaign's rules and its scheduler (the file reader, the store and the demo are their shells)
              "voicecore/outbound/campaign_rules.py", "voicecore/outbound/campaign.py")
IO_SHELL_NAMES = frozenset({"transport.py"})  # a pure package's one I/O shell, by name

FORBIDDEN = frozenset({
    "asyncio", "zmq", "websockets", "time", "os", "random", "uuid", "socket", "secrets", "threading",
    "subprocess", "selectors", "select", "signal", "multiprocessing", "datetime", "logging", "pathlib",
    "shutil", "io",
})
FORBIDDEN_CALLS = frozenset({"open", "print", "input"})  # builtins that touch a file or the terminal

# module -> the forbidden imports it may use, each with its reason. Keep it short: a new entry is a
# design decision, not a way to make the test pass.
IO_ALLOWED: dict[str, frozenset[str]] = {
    # The knowledge-base folder, watched: reads files, logs a reload (the shell of validate/).
    "voicecore/validate/watch.py": frozenset({"pathlib", "logging"}),
    # load_knowledge_dir, the module's one documented shell helper, reads the folder (function-local import).
    "voicecore/validate/knowledge.py": frozenset({"pathlib"}),
    # A function's date and time arguments are checked with datetime's ISO parser (fromisoformat): parsing,
    # never the clock (no now(), today()).
    "voicecore/agent/arguments.py": frozenset({"datetime"}),
    # Calling windows read the times passed in on the callee's clock (fromtimestamp with a zone, combine):
    # arithmetic on given times, never the clock (no now(), today()).
    "voicecore/outbound/campaign_rules.py": frozenset({"datetime"}),
}
MIN_PURE_MODULES = 36  # 39 when written; lower it only when modules were merged, never to make a miss pass


def pure_modules() -> list[str]:
    found: set[Path] = set()
    for top in ("voicecore", "workers"):
        found.update((ROOT / top).rglob("core.py"))
        found.update((ROOT / top).rglob("*_core.py"))
    for package in PURE_PACKAGES:
        found.update(path for path in (ROOT / package).rglob("*.py") if path.name not in IO_SHELL_NAMES)
    found.update(ROOT / relative for relative in PURE_FILES)
    return sorted(path.relative_to(ROOT).as_posix() for path in found if path.is_file())


PURE_MODULES = pure_modules()


def test_the_convention_finds_every_core():
    assert len(PURE_MODULES) >= MIN_PURE_MODULES, f"only {len(PURE_MODULES)} pure modules found: {PURE_MODULES}"
    # one module per rule of the convention, and the ones the hand-kept list used to miss (controller,
    # flow, spine, REST builder, validator core), so a convention change cannot drop them unnoticed
    for relative in ("workers/pacer/core.py", "workers/validator/core.py", "voicecore/sim/carrier_core.py",
                     "voicecore/carriers/twilio/stream.py", "voicecore/carriers/twilio/rest.py", "voicecore/realtime/events.py",
                     "voicecore/bus/messages.py", "voicecore/validate/numbers.py", "voicecore/call/controller.py",
                     "voicecore/call/flow.py", "voicecore/call/spine.py", "voicecore/sim/model/session.py",
                     "voicecore/timing.py"):
        assert relative in PURE_MODULES, f"{relative} is not found by the pure-module convention"


def test_the_allow_list_names_real_modules():
    for relative in IO_ALLOWED:
        assert relative in PURE_MODULES, f"IO_ALLOWED names {relative}, which the convention does not find"


@pytest.mark.parametrize("relative", PURE_MODULES)
def test_core_imports_no_io(relative):
    tree = ast.parse((ROOT / relative).read_text())
    imported = set()
    called = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            called.add(node.func.id)
    forbidden = (imported & FORBIDDEN) - IO_ALLOWED.get(relative, frozenset())
    assert not forbidden, f"{relative} imports {sorted(forbidden)}"
    if relative not in IO_ALLOWED:
        assert not called, f"{relative} calls {sorted(called)}"
