"""The standbys start once the node serves: ``python -m voicecore.standby_start ROLE PROCESS_NUM MODULE`` runs
``python -m MODULE``; the second and later processes of a role (PROCESS_NUM > 0, supervisord's
``%(process_num)d``) only after every role's ``leader-ROLE.pid`` names a live process.

Why: a node starts two of each worker (voicecore/standby.py). Started together, the four standbys' imports
(about 2.5 CPU s) shared the two cores with the serving processes' imports and the pacer's numba compile, the
start's critical path, so the node was healthy a second or two later than without them
(docs/explanation/measured.md#cold-start). Waiting for their own role only is not enough: the gateway serves
seconds before the pacer has compiled. A standby is only needed once something serves; it warms up in the
seconds after. Which process serves is still decided by the role's lock, not by the number: a restarted
process 0 of a role whose standby took over passes at once and becomes the new standby.

Light on purpose: process 0 imports nothing here but the standard library, and a waiting process nothing of
its worker until it starts.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

POLL_S = 0.05
# A serving process that never announces itself (one that cannot start, restarted again and again) does not
# keep its standby from starting for ever: after this long the standby starts anyway, as before.
WAIT_AT_MOST_S = 180.0


def runtime_dir_from_environment() -> Path:
    configured = os.environ.get("VOICECORE_RUNTIME_DIR", "")
    if configured:
        return Path(configured)
    from voicecore.bus.transport import default_runtime_dir  # what a worker without the setting uses

    return default_runtime_dir()


def wait_for_node_serving(runtime_dir: Path, at_most_s: float = WAIT_AT_MOST_S, poll_s: float = POLL_S) -> list[str]:
    """Until every role's serving process has announced itself or ``at_most_s`` has passed: the roles
    without one (empty: the node serves)."""
    from voicecore.processes import pid_alive
    from voicecore.standby import ROLES, leader_pid  # a few standard modules: this process waits anyway

    deadline = time.monotonic() + at_most_s
    while True:
        unserved = [role for role in ROLES if not pid_alive(leader_pid(runtime_dir, role))]
        if not unserved or time.monotonic() >= deadline:
            return unserved
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or not args[1].isdigit():
        raise SystemExit("usage: python -m voicecore.standby_start ROLE PROCESS_NUM MODULE")
    role, process_num, module = args[0], int(args[1]), args[2]
    if process_num > 0:
        runtime_dir = runtime_dir_from_environment()
        if unserved := wait_for_node_serving(runtime_dir):
            print(f"{role} process {process_num}: no serving {', '.join(unserved)} announced in {runtime_dir} after "
                  f"{WAIT_AT_MOST_S:.0f} s; starting anyway", file=sys.stderr, flush=True)
    sys.argv = [module]  # as `python -m MODULE` sees it (run_module puts the module's path first)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
