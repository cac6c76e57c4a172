"""No module reaches into another package's private names (a leading underscore means "only here").

Every module under voicecore/, workers/ and bench/ is parsed (nothing is imported). A "package" is the first
two components of a module's dotted name: voicecore.sim.model.session is in voicecore.sim, voicecore/demo.py
is voicecore.demo, workers/validator/core.py is workers.validator, bench/run.py is bench.run. Within its own
package a module may import private names (voicecore.sim.model.session may use voicecore.sim.audio_clips._x);
across packages it may not:
- `from <other package> import _name` (relative imports are resolved first), or a private module on the
  way (`from voicecore.x._impl import name`, `import voicecore.x._impl`);
- `module._name` where `module` is bound by an import of another package's module (`from voicecore.sim
  import carrier` ... `carrier._CallRunner`).
Dunder names (`__version__`, `__future__`) are not private.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP_PACKAGES = ("voicecore", "workers", "bench")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private_uses(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, what) of every use of another package's private name in ``source`` (module ``module``)."""
    own = package_of(module)
    found: list[tuple[int, str]] = []
    bound: dict[str, str] = {}  # local name -> the dotted name it was imported as
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _absolute(node, module, is_package)
            foreign = package_of(target) != own
            if foreign and any(_is_private(part) for part in target.split(".")):
                found.append((node.lineno, f"from {target} import ..."))
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{target}.{alias.name}"
                if foreign and _is_private(alias.name):
                    found.append((node.lineno, f"from {target} import {alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if package_of(alias.name) != own and any(_is_private(part) for part in alias.name.split(".")):
                    found.append((node.lineno, f"import {alias.name}"))
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    bound[top] = top
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
            continue
        chain: list[str] = []
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue  # an attribute of an object, not of an imported module
        target = ".".join([bound[value.id], *reversed(chain)])
        if target.split(".")[0] in TOP_PACKAGES and package_of(target) != own:
            found.append((node.lineno, f"{target}.{node.attr}"))
    return found


def _modules() -> list[Path]:
    return sorted(path for top in TOP_PACKAGES for path in (ROOT / top).rglob("*.py"))


def test_no_private_names_across_packages():
    problems = []
    for path in _modules():
        relative = str(path.relative_to(ROOT))
        for line, what in private_uses(path.read_text(encoding="utf-8"), module_name(path),
                                       path.name == "__init__.py"):
            problems.append(f"{relative}:{line}: {what}")
    assert not problems, "private names used across packages:\n" + "\n".join(problems)


def test_the_scan_sees_the_tree():
    modules = _modules()
    assert len(modules) > 50
    assert module_name(ROOT / "voicecore" / "sim" / "model" / "__init__.py") == "voicecore.sim.model"
    assert package_of("voicecore.sim.model.session") == "voicecore.sim"


def test_the_detector():
    source = (
        "from voicecore.validate.numbers import _EN_WORDS, LANGUAGES\n"
        "from voicecore.sim.audio_clips import _PACKAGE\n"  # own package (voicecore.sim): allowed
        "from . import _private_sibling\n"  # relative, own package: allowed
        "from ...validate import _x\n"  # relative, resolves to voicecore.validate: not allowed
        "from voicecore.bus._impl import thing\n"
        "from __future__ import annotations\n"
        "import voicecore.demo as demo\n"
        "from voicecore.sim import carrier\n"
        "demo._fetch_metrics(None)\n"
        "carrier._CallRunner\n"
        "self._state = 1\n"  # an object's attribute, not a module's
    )
    found = [what for _, what in private_uses(source, "voicecore.sim.model.session")]
    assert found == [
        "from voicecore.validate.numbers import _EN_WORDS",
        "from voicecore.validate import _x",
        "from voicecore.bus._impl import ...",
        "voicecore.demo._fetch_metrics",
    ]
