"""The import arrows of the tree: ``workers/`` and ``bench/`` import ``voicecore``, never the other way.

The library (voicecore/) must work without the process shells or the bench next to it (a non-editable
install, another project using the call logic), so no module under voicecore/ imports ``workers`` or
``bench``; the `voicecore bench` subcommand comes in through the ``voicecore.commands`` entry point
group instead. Checked on the source with ast (import statements; a name built at run time for
importlib is out of scope).
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
from pathlib import Path

import pytest

from voicecore import cli

ROOT = Path(__file__).resolve().parents[2]
PROCESS_PACKAGES = {"workers", "bench"}


def imported_modules(path: Path) -> set[str]:
    """Absolute module names ``path`` imports (``from x import y`` counts as x and x.y)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def top_level(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


LIBRARY_MODULES = sorted(ROOT.glob("voicecore/**/*.py"))


def test_the_library_has_modules_to_check():
    assert len(LIBRARY_MODULES) > 30 and ROOT / "voicecore" / "call" / "controller.py" in LIBRARY_MODULES


@pytest.mark.parametrize("path", LIBRARY_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_library_module_imports_a_process_or_the_bench(path):
    assert top_level(imported_modules(path)) & PROCESS_PACKAGES == set()


def test_the_arrow_is_caught_where_it_would_be_written(tmp_path):
    """The check sees the forms a back-arrow takes (guards the test above against passing vacuously)."""
    module = tmp_path / "m.py"
    for line in ("import workers.model.main", "from bench.cli import register", "from workers.model import main",
                 "def f():\n    import bench.run"):
        module.write_text(line + "\n")
        assert top_level(imported_modules(module)) & PROCESS_PACKAGES, line
    module.write_text("from . import bench\nfrom .workers import x\n")  # relative: inside voicecore itself
    assert not top_level(imported_modules(module)) & PROCESS_PACKAGES


def test_the_processes_import_the_library():
    model_worker = imported_modules(ROOT / "workers" / "model" / "main.py")
    assert {"voicecore.call.controller", "voicecore.call.record", "voicecore.record"} <= model_worker


def test_the_bench_command_comes_from_its_entry_point():
    entries = {e.name: e.value for e in importlib.metadata.entry_points(group=cli.COMMAND_GROUP)}
    assert entries.get("bench") == "bench.cli:register"
    args = cli.build_parser().parse_args(["bench", "--calls", "5", "--transport", "unix", "--pin-stack", "0"])
    assert (args.command, args.calls, args.transport, args.pin_stack) == ("bench", 5, "unix", "0")


def test_a_command_that_cannot_be_loaded_is_reported_not_raised(monkeypatch, capsys):
    broken = importlib.metadata.EntryPoint(name="broken", value="no_such_package_xyz.cli:register",
                                           group=cli.COMMAND_GROUP)
    monkeypatch.setattr(cli.importlib.metadata, "entry_points", lambda group: [broken])
    parser = cli.build_parser()
    assert "broken" in parser.format_help()  # still listed: a user sees it exists and why it fails
    assert cli.main(["broken", "--calls", "3"]) == 2
    err = capsys.readouterr().err
    assert "'broken' command is unavailable" in err and "no_such_package_xyz" in err
    assert "Traceback" not in err
    assert cli.build_parser().parse_args(["demo", "--calls", "2"]).calls == 2  # the other commands still work


CALL_IMPLEMENTATIONS = {"voicecore.call.controller", "voicecore.call.core", "voicecore.call.spine"}


def run_time_imports(path: Path) -> set[str]:
    """What ``path`` imports when it runs: ``if TYPE_CHECKING:`` blocks left out (they name types only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("module", ["driver", "actions"])
def test_the_call_interface_and_its_vocabulary_import_no_implementation(module):
    """The driver protocol and the action vocabulary are what implementations share: importing one of the
    implementations from them would tie every driver (and the recorder, replay) to that one."""
    names = run_time_imports(ROOT / "voicecore" / "call" / f"{module}.py")
    assert names & CALL_IMPLEMENTATIONS == set()
    assert module == "actions" or "voicecore.call.actions" in names


def test_run_time_imports_leave_out_type_checking_blocks_only(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from voicecore.call.core import X\n"
                      "from voicecore.call.controller import Y\n")
    assert run_time_imports(module) & CALL_IMPLEMENTATIONS == {"voicecore.call.controller"}


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports when it runs, imports inside functions included (a
    cycle through a function-level import still ties the modules together; it only fails later), ``if
    TYPE_CHECKING:`` blocks left out (they name types). ``from pkg import mod`` counts as mod, not pkg."""
    paths = sorted(ROOT.glob(f"{package}/**/*.py"))
    names = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in paths}

    def module_of(dotted: str) -> str:
        while dotted and dotted not in names:
            dotted = dotted.rpartition(".")[0]
        return dotted

    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                node.body = []
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                deps.update(module_of(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    deps.add(submodule if submodule in names else module_of(node.module))
        graph[name] = {dep for dep in deps if dep and dep != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_bench_has_no_import_cycle():
    """bench/main.py hands a run to run.py, soak.py, badinput.py or chaos.py; those build on run.py, which
    imports none of them."""
    graph = import_graph("bench")
    assert "bench.main" in graph and "bench.run" in graph["bench.main"]
    assert cycles(graph) == []


# The micro benchmarks time one worker core each (the pacer's and the validator's hot loops): those cores are
# what they measure, so they import them. Every other bench module drives the stack as a user does, through
# voicecore's public names, and so keeps working whatever the workers' insides become.
MICRO_BENCHES = {"bench/micro/bench_pacer.py", "bench/micro/bench_validator.py"}


@pytest.mark.parametrize("path", sorted(ROOT.glob("bench/**/*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_bench_reaches_the_workers_only_through_the_library(path):
    name = str(path.relative_to(ROOT))
    if name in MICRO_BENCHES:
        assert "workers" in top_level(imported_modules(path)), f"{name} no longer imports a worker core: take it off the list"
        return
    assert "workers" not in top_level(imported_modules(path))


@pytest.mark.parametrize("package", ["voicecore", "workers"])
def test_the_library_and_the_processes_have_no_import_cycle(package):
    graph = import_graph(package)
    assert len(graph) > 5
    assert cycles(graph) == []


def test_the_graph_reads_imports_as_they_run(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import X\n"
                                           "from pkg import c\ndef f():\n    import pkg.d\n")
    for name in "bcd":
        (tmp_path / "pkg" / f"{name}.py").write_text("")
    assert import_graph("pkg")["pkg.a"] == {"pkg.c", "pkg.d"}


def test_a_cycle_is_found_where_it_would_be_written():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
