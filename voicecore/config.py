"""Configuration: defaults, then an optional TOML file, then ``VOICECORE_*`` environment variables.

Owns the list of settings and their parsing. Every setting is one row of ``SETTINGS`` so the README table,
the parser and the tests cannot drift apart. Processes receive the same environment from the supervisor,
so every process sees the same configuration.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path

ENV_PREFIX = "VOICECORE_"


class ConfigError(ValueError):
    """A setting has a value we cannot use (our operator's fault, reported before anything starts)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    name: str  # the field name; env var is VOICECORE_<NAME upper>, TOML key is the name
    kind: type
    default: object
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting("listen", str, "127.0.0.1:8080", "host:port the gateway serves HTTP and WebSocket on"),
    Setting("public_url", str, "", "public base URL Twilio reaches us at (TwiML stream URL, signature URL); default http://<listen>"),
    Setting("twilio_auth_token", str, "", "auth token for X-Twilio-Signature; empty: a random per-run token (demo only)"),
    Setting("realtime_url", str, "", "realtime model WebSocket URL; empty and no key: the built-in simulator"),
    Setting("realtime_api_key", str, "", "API key for the realtime model vendor"),
    Setting("model", str, "gpt-realtime", "realtime model name"),
    Setting("realtime_naming", str, "ga", "event naming the model client sends: ga or beta"),
    Setting("max_calls", int, 256, "concurrent call slots in the shared-memory arena"),
    Setting("runtime_dir", str, "", "private directory (0700) for sockets and state; default $XDG_RUNTIME_DIR/voicecore or /tmp/voicecore-<uid>"),
    Setting("record_dir", str, "var/records", "directory for call recordings"),
    Setting("shm_dir", str, "/dev/shm", "directory of the shared-memory arena file"),
    Setting("lead_ms", int, 80, "audio the pacer keeps queued ahead in the carrier's buffer"),
    Setting("mark_every_frames", int, 5, "a mark after this many 20 ms frames (played-position resolution)"),
    Setting("start_hold_ms", int, 60, "when the carrier's buffer is dry, wait up to this long for a lead's worth of audio before releasing"),
    Setting("twilio_api_base", str, "https://api.twilio.com", "base URL of Twilio's REST API (hang up, transfer); tests point it at a local fake"),
    Setting("call_control", str, "spine", "spine: barge-in on the model's speech_started; turns: the turn-taking controller (semantic barge-in, debounce, watchdog, check-ins), with call records"),
    Setting("gate_policy", str, "off", "which responses the validator must approve before they play: off, numbers, scripted or strict"),
    Setting("safe_line", str, "I can't verify that.", "what the agent says instead of a response the validator rejected"),
    Setting("sim_port", int, 9100, "port of the built-in realtime model simulator"),
    Setting("log_level", str, "info", "debug, info, warning or error"),
    Setting("knowledge_dir", str, "", "folder of markdown files the validator grounds numbers in (reloaded when changed); empty: no knowledge base, every number is rejected (fail-closed)"),
    Setting("gate_margin_ms", int, 200, "gated audio is released this far behind the audio the approved transcript covers"),
)

_BY_NAME = {s.name: s for s in SETTINGS}


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    listen: str
    public_url: str
    twilio_auth_token: str
    realtime_url: str
    realtime_api_key: str
    model: str
    realtime_naming: str
    max_calls: int
    runtime_dir: str
    record_dir: str
    shm_dir: str
    lead_ms: int
    mark_every_frames: int
    start_hold_ms: int
    twilio_api_base: str
    call_control: str
    gate_policy: str
    safe_line: str
    sim_port: int
    log_level: str
    knowledge_dir: str
    gate_margin_ms: int

    @property
    def listen_host(self) -> str:
        return self.listen.rsplit(":", 1)[0]

    @property
    def listen_port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.listen}").rstrip("/")

    @property
    def uses_simulator(self) -> bool:
        """True when no vendor is configured: the stack runs the built-in model simulator."""
        return not self.realtime_url and not self.realtime_api_key

    @property
    def model_url(self) -> str:
        if self.realtime_url:
            return self.realtime_url
        if self.realtime_api_key:
            return "wss://api.openai.com/v1/realtime"
        return f"ws://127.0.0.1:{self.sim_port}/v1/realtime"

    def as_env(self) -> dict[str, str]:
        """The environment that reproduces this configuration in a child process."""
        return {ENV_PREFIX + s.name.upper(): str(getattr(self, s.name)) for s in SETTINGS}


def _coerce(setting: Setting, raw: object, source: str) -> object:
    if setting.kind is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{source}: expected an integer, got {raw!r}")
        try:
            return int(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: expected an integer, got {raw!r}") from None
    if not isinstance(raw, str):
        raise ConfigError(f"{source}: expected a string, got {raw!r}")
    return raw


def _validate(values: dict[str, object]) -> None:
    listen = str(values["listen"])
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"listen: expected host:port, got {listen!r}")
    if values["realtime_naming"] not in ("ga", "beta"):
        raise ConfigError(f"realtime_naming: expected ga or beta, got {values['realtime_naming']!r}")
    if not 1 <= int(values["max_calls"]) <= 4096:  # type: ignore[arg-type]
        raise ConfigError(f"max_calls: expected 1..4096, got {values['max_calls']}")
    if not 20 <= int(values["lead_ms"]) <= 1000:  # type: ignore[arg-type]
        raise ConfigError(f"lead_ms: expected 20..1000, got {values['lead_ms']}")
    if not 1 <= int(values["mark_every_frames"]) <= 50:  # type: ignore[arg-type]
        raise ConfigError(f"mark_every_frames: expected 1..50, got {values['mark_every_frames']}")
    if not 0 <= int(values["start_hold_ms"]) <= 1000:  # type: ignore[arg-type]
        raise ConfigError(f"start_hold_ms: expected 0..1000, got {values['start_hold_ms']}")
    if not 0 <= int(values["gate_margin_ms"]) <= 2000:  # type: ignore[arg-type]
        raise ConfigError(f"gate_margin_ms: expected 0..2000, got {values['gate_margin_ms']}")
    if values["call_control"] not in ("spine", "turns"):
        raise ConfigError(f"call_control: expected spine or turns, got {values['call_control']!r}")
    if values["gate_policy"] not in ("off", "numbers", "scripted", "strict"):
        raise ConfigError(f"gate_policy: expected off, numbers, scripted or strict, got {values['gate_policy']!r}")
    if values["log_level"] not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"log_level: expected debug, info, warning or error, got {values['log_level']!r}")


def load_config(environ: Mapping[str, str], toml_path: str | Path | None = None) -> Config:
    """Build the configuration. ``VOICECORE_CONFIG`` names the TOML file when ``toml_path`` is None."""
    values: dict[str, object] = {s.name: s.default for s in SETTINGS}
    path = toml_path if toml_path is not None else environ.get(ENV_PREFIX + "CONFIG") or None
    if path:
        try:
            with open(path, "rb") as f:
                table = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
        table = table.get("voicecore", table)
        for key, raw in table.items():
            if key not in _BY_NAME:
                raise ConfigError(f"config file {path}: unknown setting {key!r}")
            values[key] = _coerce(_BY_NAME[key], raw, f"{path}: {key}")
    for setting in SETTINGS:
        env_name = ENV_PREFIX + setting.name.upper()
        if env_name in environ:
            values[setting.name] = _coerce(setting, environ[env_name], env_name)
    _validate(values)
    return Config(**values)  # type: ignore[arg-type]


def settings_table_markdown() -> str:
    """The README's configuration table, generated from SETTINGS."""
    rows = ["| environment variable | TOML key | default | meaning |", "| --- | --- | --- | --- |"]
    for s in SETTINGS:
        default = f"`{s.default}`" if s.default != "" else "(empty)"
        rows.append(f"| `{ENV_PREFIX}{s.name.upper()}` | `{s.name}` | {default} | {s.help} |")
    return "\n".join(rows)
