"""The import arrows of the carriers: one package per carrier, a shared base, and a registry that lists them.

- ``voicecore/carriers/<name>/`` (a carrier's package) imports its own modules, the shared base
  (``voicecore/carriers/*.py``) and the library's shared modules (timing, errors, ...), never another carrier's
  package, the registry, call_control, the old ``voicecore/twilio/`` names, a process or the bench: a carrier can
  be read, tested and added alone.
- The shared base imports no carrier package: the registry (and call_control, which finds a call's carrier
  there) is the one module that names them all, so adding a carrier touches its package and the registry line.
- ``voicecore/twilio/`` is the old place of Twilio's modules, kept as re-exports for code outside the repository:
  it imports ``voicecore.carriers.twilio`` and nothing in the repository imports it, so the two never form a loop.
- Every carrier package has its descriptor (``carrier.py``) and the registry serves each of them; its simulator
  side (``sim.py``: what the carrier simulator asks it, voicecore/carriers/simulator.py) is reached from the
  descriptor, so the simulator finds a carrier where the gateway does.
Checked on the source with ast, like tests/rules/test_import_arrows.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_import_arrows import imported_modules
from voicecore.carriers import registry

ROOT = Path(__file__).resolve().parents[2]
CARRIERS_DIR = ROOT / "voicecore" / "carriers"
PACKAGES = sorted(p.name for p in CARRIERS_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists())
SHARED = sorted(p for p in CARRIERS_DIR.glob("*.py") if p.name not in ("registry.py", "call_control.py"))
# The modules that name every carrier on purpose: the list itself, and the one that looks a call's carrier up in it.
ALL_CARRIERS = {"voicecore.carriers.registry", "voicecore.carriers.call_control"}


def carrier_packages_imported(names: set[str]) -> set[str]:
    return {name.split(".")[2] for name in names
            if name.startswith("voicecore.carriers.") and name.split(".")[2] in PACKAGES}


def test_there_are_carrier_packages_and_shared_modules_to_check():
    assert {"twilio", "telnyx", "plivo", "vonage", "exotel"} <= set(PACKAGES)
    assert CARRIERS_DIR / "base.py" in SHARED and CARRIERS_DIR / "events.py" in SHARED


@pytest.mark.parametrize("package", PACKAGES)
def test_a_carrier_package_imports_itself_and_the_shared_base_only(package):
    for path in sorted((CARRIERS_DIR / package).glob("*.py")):
        names = imported_modules(path)
        others = carrier_packages_imported(names) - {package}
        assert not others, f"{path.relative_to(ROOT)} imports another carrier: {sorted(others)}"
        assert not names & ALL_CARRIERS, f"{path.relative_to(ROOT)} imports the registry or call_control"
        old = {n for n in names if n == "voicecore.twilio" or n.startswith("voicecore.twilio.")}
        assert not old, f"{path.relative_to(ROOT)} imports the old voicecore.twilio names: {sorted(old)}"
        shells = {n.split(".")[0] for n in names} & {"workers", "bench"}
        assert not shells, f"{path.relative_to(ROOT)} imports {sorted(shells)}"


@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_the_shared_base_imports_no_carrier(path):
    names = imported_modules(path)
    assert not carrier_packages_imported(names), f"{path.relative_to(ROOT)} imports a carrier package"
    assert not names & ALL_CARRIERS
    assert not any(n == "voicecore.twilio" or n.startswith("voicecore.twilio.") for n in names)


def test_nothing_in_the_repository_imports_the_old_twilio_names():
    roots = ("voicecore", "workers", "bench", "tests", "examples")
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            if (ROOT / "voicecore" / "twilio") in path.parents:
                continue
            names = imported_modules(path)
            assert not any(n == "voicecore.twilio" or n.startswith("voicecore.twilio.") for n in names), path


def test_every_carrier_package_has_its_descriptor_in_the_registry():
    assert set(registry.NAMES) == set(PACKAGES)
    for package in PACKAGES:
        assert (CARRIERS_DIR / package / "carrier.py").exists(), package
        assert registry.get(package).name == package
        assert type(registry.get(package)).__module__ == f"voicecore.carriers.{package}.carrier"
        assert type(registry.get(package).simulator).__module__ == f"voicecore.carriers.{package}.sim"
