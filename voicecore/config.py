"""Configuration: defaults, then an optional TOML file, then ``VOICECORE_*`` environment variables.

Owns the list of settings and their parsing. Every setting is one row of ``SETTINGS`` so the settings page
(docs/reference/settings.md, generated from it), the parser and the tests cannot drift apart. Processes
receive the same environment from the supervisor, so every process sees the same configuration.
"""

from __future__ import annotations

import binascii
import dataclasses
import os
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from voicecore.console.guard import normalize_origin, parse_origins, public_url_origin
from voicecore.errors import MisuseError

ENV_PREFIX = "VOICECORE_"
METRICS_LOCAL = "local"  # metrics_listen: /metrics on the gateway's address, for this host only
UNIX_PREFIX = "unix:"  # listen = "unix:/run/voicecore/gateway.sock"
MAX_UNIX_PATH_BYTES = 107  # sockaddr_un.sun_path is 108 bytes with its NUL on Linux


class ConfigError(MisuseError, ValueError):
    """A setting has a value we cannot use (our operator's fault, reported before anything starts)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    name: str  # the field name; env var is VOICECORE_<NAME upper>, TOML key is the name
    kind: type
    default: object
    help: str


# The least max_pending_connections falls back to: a small node still takes a burst of connections.
PENDING_CONNECTIONS_FLOOR = 64

SETTINGS: tuple[Setting, ...] = (
    Setting("listen", str, "127.0.0.1:8080", "host:port the gateway serves HTTP and WebSocket on, or unix:PATH for a Unix socket behind a local TLS proxy (then set public_url)"),
    Setting("public_url", str, "", "public base URL Twilio reaches us at (TwiML stream URL, signature URL); default http://<listen>; required with listen = unix:PATH"),
    Setting("twilio_auth_token", str, "", "auth token for X-Twilio-Signature; empty: a random per-run token (demo only)"),
    Setting("telnyx_public_key", str, "", "Telnyx: the webhook public key (Ed25519, base64, Mission Control) that checks telnyx-signature-ed25519 and telnyx-timestamp on POST /telnyx/voice; empty: Telnyx is not served (404 on /telnyx/*)"),
    Setting("plivo_auth_token", str, "", "Plivo: the auth token that checks X-Plivo-Signature-V3 on POST /plivo/voice; empty: Plivo is not served (404 on /plivo/*)"),
    Setting("vonage_signature_secret", str, "", "Vonage: the signature secret that checks the signed-webhook JWT (Authorization: Bearer) on /vonage/answer and /vonage/event; empty: Vonage is not served (404 on /vonage/*)"),
    Setting("telnyx_codec", str, "PCMU", "Telnyx: the G.711 law the TeXML answer asks Telnyx to stream both ways: PCMU, or PCMA (A-law callers: with alaw_passthrough the A-law reaches the model and comes back untouched)"),
    Setting("vonage_sample_rate_hz", int, 16000, "Vonage: the L16 rate the NCCO asks for: 16000 (resampled at the gateway edge with soxr, 10 ms each way) or 8000 (no resampling)"),
    Setting("exotel_username", str, "", "Exotel: the Basic-auth user the dynamic-URL request to /exotel/voice must carry (with exotel_password); empty: Exotel is not served (404 on /exotel/*)"),
    Setting("exotel_password", str, "", "Exotel: the Basic-auth password of that request; required with exotel_username"),
    Setting("realtime_url", str, "", "realtime model WebSocket URL; empty and no key: the built-in simulator"),
    Setting("realtime_api_key", str, "", "API key for the realtime model vendor"),
    Setting("model", str, "gpt-realtime", "realtime model name"),
    Setting("gemini_vertex_project", str, "", "Gemini Live through Vertex AI: the Google Cloud project (its id); set, an agent on Gemini dials Vertex AI's Live endpoint with an OAuth access token from Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS: a service account's JSON key; needs the vertex extra) instead of the Gemini API with GEMINI_API_KEY; empty: GOOGLE_CLOUD_PROJECT when GOOGLE_GENAI_USE_VERTEXAI is true, else the Gemini API"),
    Setting("gemini_vertex_location", str, "us-central1", "Gemini Live through Vertex AI: the region whose endpoint is dialled (<location>-aiplatform.googleapis.com; global: aiplatform.googleapis.com) and that the model's resource name carries"),
    Setting("realtime_naming", str, "ga", "event naming the model client sends: ga (the vendor retired the beta interface in May 2026: beta is refused)"),
    Setting("realtime_provider", str, "auto", "the realtime vendor's API: openai (Authorization: Bearer, ?model=), azure (Azure OpenAI: api-key header, the deployment's name in the URL), or auto: azure when realtime_url is on an Azure OpenAI host (*.openai.azure.com, *.cognitiveservices.azure.com, *.services.ai.azure.com), openai otherwise"),
    Setting("realtime_deployment", str, "", "Azure OpenAI: the Realtime deployment's name (sent as ?model= on /openai/v1/realtime, &deployment= on /openai/realtime); empty: the model setting"),
    Setting("realtime_session_limit_s", int, 3600, "the vendor's longest Realtime session (OpenAI: 60 minutes); a longer call gets a new session at a pause in the conversation before it ends, with the conversation restored (60..86400)"),
    Setting("speech_model", str, "gpt-4o-mini-tts", "the vendor's text-to-speech model (Azure: its deployment) that `voicecore up` renders the fallback lines with (hold line, apologies), once per agent, voice and text, cached in lines_cache_dir; empty: no rendering (the agent's own WAV lines, else the shipped clips)"),
    Setting("lines_cache_dir", str, "", "where rendered fallback lines are kept (8 kHz mu-law, one file per model, voice and text); empty: $XDG_CACHE_HOME/voicecore/lines, else ~/.cache/voicecore/lines"),
    Setting("alaw_passthrough", bool, True, "a carrier stream in A-law (Telnyx PCMA) goes to the model as A-law and back untouched (the OpenAI Realtime session in g711_alaw / audio/pcma, which it accepts both ways); false: such a stream is transcoded to mu-law once at the gateway edge, each way"),
    Setting("send_call_id_to_vendor", bool, False, "send the call's CallSid to the realtime model vendor (X-Voicecore-Call header on the model socket); false: no call or caller identifier goes to the model endpoint (the built-in simulator, used when realtime_url and realtime_api_key are empty, always gets it)"),
    Setting("max_calls", int, 256, "concurrent call slots in the shared-memory arena"),
    Setting("max_pending_connections", int, 0, "connections the gateway holds that are not yet in a call (no request served, no stream start accepted); more are answered 503 at once; 0: twice max_calls, at least 64"),
    Setting("max_pending_per_address", int, 32, "of those, at most this many from one peer IP address (a flood from one host cannot crowd out the carrier); 0: no per-address cap (a TCP proxy in front makes every peer one address)"),
    Setting("standby_workers", bool, True, "run a warmed-up standby beside the gateway, the pacer, the model worker and the validator; it takes over within milliseconds when the serving one dies (an flock on runtime_dir/leader-ROLE.lock; the serving pid is in leader-ROLE.pid); false: one of each, a dead one is restarted by supervisord (about 1-2 s)"),
    Setting("drain_timeout_s", int, 300, "how long live calls may go on after a drain began (`voicecore drain`, or SIGTERM/SIGINT to `voicecore up`): new calls are refused at once, the node stops when the last call ends or, at this deadline, ends the calls still up; 0: end them at once"),
    Setting("drain_redirect_url", str, "", "while draining, the voice webhook answers `<Redirect method=\"POST\">URL</Redirect>` so Twilio asks another node (an absolute http(s) URL, e.g. a load balancer's /twilio/voice); empty: `<Reject reason=\"busy\"/>` (the caller hears busy and may call again)"),
    Setting("node_id", str, "", "this node's name in a fleet (in its stream tokens, logs and fanned-out events; 1-64 characters, no spaces); empty: <hostname>:<listen port>"),
    Setting("node_stream_url", str, "", "this node's own public base URL for media streams (ws(s):// or http(s)://), put in the TwiML instead of public_url's so a carrier brings the stream back to the node that answered the webhook (e.g. wss://node-a.voice.example.com); empty: public_url's"),
    Setting("stream_tokens", str, "signed", "signed: the webhook's session token is signed (HMAC over CallSid, node, expiry, nonce) and any node of the fleet accepts it, once; local: a random token only the issuing node accepts (kept in its memory)"),
    Setting("token_secret", str, "", "HMAC key of signed stream tokens, the same on every node of a fleet (at least 16 characters); empty: derived from twilio_auth_token"),
    Setting("token_store_timeout_ms", int, 250, "with signed tokens and a PostgreSQL database_url, how long a stream start waits for the store to confirm the token's first use fleet-wide; a slower or failing store is passed over (fail open: this node's own single-use check still holds)"),
    Setting("fanout_url", str, "", "NATS server (nats://host:4222, several comma-separated) through which each node's recorder publishes its calls' live observer events and each node's console receives the fleet's; empty: observers see this node's calls only"),
    Setting("runtime_dir", str, "", "private directory (0700) for sockets and state; default $XDG_RUNTIME_DIR/voicecore or /tmp/voicecore-<uid>"),
    Setting("record_dir", str, "", "directory (created 0700) for call records, one file per call (mode 0600); empty: no records (records hold what callers said: opt in; the demo records by default)"),
    Setting("database_url", str, "", "the call store, filled by the recorder from each call (recorded or not: record_calls): sqlite:///ABSOLUTE/PATH or postgresql://...; empty: sqlite:///<record_dir>/calls.db when record_dir is set, else no store"),
    Setting("retention_days", int, 0, "calls older than this many days are deleted from the call store, and their record files from record_dir (by the recorder, at start and hourly); 0: keep them forever"),
    Setting("call_webhook_url", str, "", "http(s) URL that gets a signed JSON summary of every call once it is in the call store (outcome, duration, turns, latency, tool calls, transcript); empty: none"),
    Setting("call_webhook_secret", str, "", "HMAC-SHA256 key of the end-of-call webhook's X-Voicecore-Signature (t=<unix>,v1=<hex> over \"<t>.<body>\"); required with call_webhook_url"),
    Setting("console_listen", str, "127.0.0.1:8090", "host:port of the console (call list, call pages, the /observe WebSocket; API keys from `voicecore console-key add NAME`), a port of its own, never the gateway's; runs when there is a call store; empty: no console"),
    Setting("console_public_url", str, "", "the URL browsers reach the console at when a proxy is in front of it (https://console.example.com; the console serves at the root of its host): its origin is one of console_origins by default, and https makes the session cookie Secure (named __Host-voicecore_session_PORT); empty: the console is reached at console_listen"),
    Setting("console_chat_limit", int, 600, "the most messages one console API key (its /chat connections and browser sessions together) may send to /chat in 10 s; the connection whose message goes over it is closed 1008 (each connection is also held to 20 in 10 s)"),
    Setting("console_chat_idle_s", float, 300.0, "a text session (/chat, POST /chat/messages) that no connection or request has used for this many seconds ends: it is stored as a call of carrier chat and its id answers 404; until then a client may continue it by its id"),
    Setting("console_chat_sessions", int, 1000, "the most text sessions the console keeps at once (in use or idle less than console_chat_idle_s); a new one past it is refused (503, /chat close 1013)"),
    Setting("console_origins", str, "", "comma-separated origins (scheme://host[:port]) of the console's pages: an /observe upgrade, a POST, and a JSON API read with the session cookie from any other Origin is refused (403, logged); a program with an API key and no Origin is served; empty: console_public_url's origin and console_listen's (on a loopback or all-interfaces address: http://127.0.0.1:PORT, http://localhost:PORT, http://[::1]:PORT)"),
    Setting("record_calls", bool, True, "with a record_dir, write each call's record file there (the caller's audio as record_caller_audio says, and every entry `voicecore replay` needs); false: no record files, and the call store (database_url, else <record_dir>/calls.db) still gets each call's summary, turns, transcripts, tool runs and events, live from the model worker"),
    Setting("record_caller_audio", bool, True, "call records keep the caller's audio (for `voicecore replay --wav`); false: timing only"),
    Setting("metrics_listen", str, "local", "where GET /metrics is served: local (on the gateway's listen address, answered only to this host: a loopback peer or the Unix socket, and no X-Forwarded-For, Forwarded or X-Real-IP header, which a proxy or tunnel in front adds; others get 403), or host:port of a listener of its own that serves /metrics and /healthz alone (a scraper on another host: e.g. 0.0.0.0:9464 in a pod); then the gateway's listen address answers 404 on /metrics"),
    Setting("console_cookie_secure", str, "auto", "the console's session cookie is Secure (and named __Host-voicecore_session_PORT): auto when console_public_url is https://; always: also when a TLS proxy in front of console_listen is not named in console_public_url"),
    Setting("shm_dir", str, "/dev/shm", "directory of the shared-memory arena file"),
    Setting("lead_ms", int, 80, "audio the pacer keeps queued ahead in the carrier's buffer"),
    Setting("mark_every_frames", int, 5, "a mark after this many 20 ms frames (played-position resolution)"),
    Setting("release_frames", int, 2, "the pacer releases frames this many at a time (one socket write for them): the carrier's queue swings between lead - (n-1) and lead + (n-1) frames; 1: top the lead up every tick"),
    Setting("start_hold_ms", int, 300, "when the carrier's buffer is dry, wait up to this long for a lead's worth of audio before releasing (a start, or audio after the model fell behind): a vendor delivering at real time fills a lead within a few ticks; the bound is reached only when its delivery pauses after a short first chunk, and then the answer starts later instead of stuttering"),
    Setting("plivo_max_unplayed_ms", int, 400, "Plivo: the most audio the pacer leaves in Plivo's buffer that no playedStream echo has confirmed (its checkpoints bound the lead, not time: Plivo buffers whatever is sent and may play it late); at least lead_ms + (release_frames - 1) * 20 + mark_every_frames * 20 + 20; 0: no bound, the lead by time alone"),
    Setting("twilio_api_base", str, "https://api.twilio.com", "base URL of Twilio's REST API (hang up, transfer); tests point it at a local fake"),
    Setting("telnyx_api_key", str, "", "Telnyx: the API key (Authorization: Bearer) of the Call Control hangup and transfer commands that end a Telnyx call; empty: a Telnyx call's agent cannot hang up or transfer through the API (logged; the gateway closes the stream instead)"),
    Setting("telnyx_api_base", str, "https://api.telnyx.com", "base URL of Telnyx's API (POST /v2/calls/{call_control_id}/actions/hangup|transfer); tests point it at the carrier simulator"),
    Setting("telnyx_texml_application_id", str, "", "Telnyx: the TeXML application (its connection id) that outbound calls are placed with (POST /v2/texml/calls/{id}, with telnyx_api_key); empty: voicecore call --carrier telnyx refuses"),
    Setting("plivo_auth_id", str, "", "Plivo: the auth ID (MA... or SA...) that, with plivo_auth_token, authenticates the Call API requests that hang up or transfer a Plivo call (a transfer fetches <Dial> from our /plivo/transfer); empty: a Plivo call's agent cannot hang up or transfer through the API (logged; the gateway closes the stream instead)"),
    Setting("plivo_api_base", str, "https://api.plivo.com", "base URL of Plivo's API (DELETE|POST /v1/Account/{auth_id}/Call/{call_uuid}/); tests point it at the carrier simulator"),
    Setting("vonage_application_id", str, "", "Vonage: the application id whose JWT (RS256, with vonage_private_key) authenticates PUT /v1/calls/{uuid} to hang up or transfer a Vonage call; empty: a Vonage call's agent cannot hang up or transfer through the API (logged; the gateway closes the stream instead)"),
    Setting("vonage_private_key", str, "", "Vonage: the application's private key: the PEM text, or the path of the PEM file; required with vonage_application_id"),
    Setting("vonage_api_base", str, "https://api.nexmo.com", "base URL of Vonage's Voice API (PUT /v1/calls/{uuid}); tests point it at the carrier simulator"),
    Setting("call_control", str, "auto", "turns: the turn-taking controller (turns decided by what the caller said, debounce, watchdog, check-ins, the agent's flow and tools), with call records; spine: barge-in on every speech_started of the model's VAD (the bare stream the bench measures; a caller's mm-hmm cuts the agent); auto: turns, for the configured agent or the shipped default one"),
    Setting("transcription_model", str, "", "the vendor's model that transcribes the caller's words (gpt-4o-mini-transcribe, gpt-4o-transcribe, whisper-1); empty: the agent's [turns] transcription_model"),
    Setting("agent", str, "", "agent directory (agent.toml and the files it names); empty: the shipped default agent"),
    Setting("tool_processes", int, 4, "processes the model worker runs the agent's Python tools in, one tool run at a time each (1-64; started only for an agent with Python tools): a tool that blocks or crashes stops its own process, which is killed at the tool's timeout_s and replaced"),
    Setting("tool_runs_per_call", int, 2, "Python tool runs of one call at once (1-16); more of that call's runs wait their turn, the other calls' do not"),
    Setting("gate_policy", str, "off", "which responses the validator must approve before they play: off, numbers, scripted or strict"),
    Setting("safe_line", str, "I can't verify that.", "what the agent says instead of a response the validator rejected"),
    Setting("sim_port", int, 9100, "port of the built-in realtime model simulator"),
    Setting("sim_session_limit_s", int, 3600, "built-in simulator: a session ends this long after it opened (error session_expired, then a close), as the vendor's do at 60 minutes"),
    Setting("sim_late_deltas", int, 0, "built-in simulator: audio deltas it still sends after a cancel (0-3)"),
    Setting("sim_overlap_probability", float, 0.0, "built-in simulator: chance (0-1) that a response gets a second one started while it streams, as a real server sometimes does"),
    Setting("log_level", str, "info", "debug, info, warning or error"),
    Setting("log_format", str, "text", "text, or json: one JSON object per line (time, process, pid, level, logger, message, call, and the redactable fields under fields)"),
    Setting("knowledge_dir", str, "", "folder of markdown files the validator grounds numbers in (reloaded when changed); empty: no knowledge base, every number is rejected (fail-closed)"),
    Setting("gate_margin_ms", int, 200, "gated audio is released this far behind the audio the approved transcript covers"),
    Setting("gate_release", str, "word", "word: approved words release their audio as the transcript streams; sentence: only whole sentences (a first sentence with an unverifiable number is never heard, first audio waits for it)"),
    Setting("gate_max_chars_per_s", int, 25, "fastest speech the gate assumes: approved text of c chars releases at least c/rate seconds of audio (0: off)"),
    Setting("gate_node_policies", str, "", "turns mode: release policy per flow node, e.g. greeting=scripted,question=scripted,answer=numbers (* for every node); nodes not named use gate_policy"),
    Setting("gate_forbidden", str, "", "phrases no gated response may say, separated by |; node-specific as node:phrase"),
    Setting("gate_language", str, "auto", "how the validator reads numbers and scripts: en, sv or auto"),
    Setting("retrieve_first", str, "auto", "turns mode: put knowledge-base snippets into each answer's instructions (on, off; auto: on when knowledge_dir is set)"),
    Setting("twilio_account_sid", str, "", "Twilio: the Account SID (AC + 32 hex digits) that `voicecore call` places calls with (POST /2010-04-01/Accounts/{sid}/Calls.json, basic auth with twilio_auth_token); empty: `voicecore call` refuses to run"),
)

_BY_NAME = {s.name: s for s in SETTINGS}


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    listen: str
    public_url: str
    twilio_auth_token: str
    telnyx_public_key: str
    plivo_auth_token: str
    vonage_signature_secret: str
    telnyx_codec: str
    vonage_sample_rate_hz: int
    exotel_username: str
    exotel_password: str
    realtime_url: str
    realtime_api_key: str
    model: str
    gemini_vertex_project: str
    gemini_vertex_location: str
    realtime_naming: str
    realtime_provider: str
    realtime_deployment: str
    realtime_session_limit_s: int
    speech_model: str
    lines_cache_dir: str
    alaw_passthrough: bool
    send_call_id_to_vendor: bool
    max_calls: int
    max_pending_connections: int
    max_pending_per_address: int
    standby_workers: bool
    drain_timeout_s: int
    drain_redirect_url: str
    node_id: str
    node_stream_url: str
    stream_tokens: str
    token_secret: str
    token_store_timeout_ms: int
    fanout_url: str
    runtime_dir: str
    record_dir: str
    database_url: str
    console_listen: str
    console_public_url: str
    console_origins: str
    console_chat_limit: int
    console_chat_idle_s: float
    console_chat_sessions: int
    retention_days: int
    call_webhook_url: str
    call_webhook_secret: str
    record_calls: bool
    record_caller_audio: bool
    metrics_listen: str
    console_cookie_secure: str
    shm_dir: str
    lead_ms: int
    mark_every_frames: int
    release_frames: int
    start_hold_ms: int
    plivo_max_unplayed_ms: int
    twilio_api_base: str
    telnyx_api_key: str
    telnyx_api_base: str
    telnyx_texml_application_id: str
    plivo_auth_id: str
    plivo_api_base: str
    vonage_application_id: str
    vonage_private_key: str
    vonage_api_base: str
    call_control: str
    transcription_model: str
    agent: str
    tool_processes: int
    tool_runs_per_call: int
    gate_policy: str
    safe_line: str
    sim_port: int
    sim_session_limit_s: int
    sim_late_deltas: int
    sim_overlap_probability: float
    log_level: str
    log_format: str
    knowledge_dir: str
    gate_margin_ms: int
    gate_release: str
    gate_max_chars_per_s: int
    gate_node_policies: str
    gate_forbidden: str
    gate_language: str
    retrieve_first: str
    twilio_account_sid: str = ""

    @property
    def listen_unix_path(self) -> str | None:
        """The Unix socket the gateway serves on (listen = "unix:PATH"), or None for host:port."""
        return unix_path_of(self.listen)

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
    def stream_base_url(self) -> str:
        """The base URL the TwiML's stream URL starts with (ws:// or wss://): this node's own address when
        node_stream_url is set, else public_url's (a fleet behind one name: any node may get the stream)."""
        base = (self.node_stream_url or self.base_url).rstrip("/")
        return base.replace("http://", "ws://", 1).replace("https://", "wss://", 1)

    @property
    def node(self) -> str:
        """This node's name in a fleet: node_id, else <hostname>:<listen port> (or the Unix socket's path)."""
        if self.node_id:
            return self.node_id
        return f"{socket.gethostname()}:{self.listen_unix_path or self.listen_port}"[:64]

    @property
    def pending_connections_limit(self) -> int:
        """Connections the gateway holds that are not yet in a call (max_pending_connections; 0: twice max_calls,
        at least PENDING_CONNECTIONS_FLOOR)."""
        return self.max_pending_connections or max(PENDING_CONNECTIONS_FLOOR, 2 * self.max_calls)

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

    @property
    def model_provider(self) -> str:
        """"openai" or "azure": realtime_provider, or what the URL's host says when it is auto."""
        from voicecore.realtime.events import detect_provider

        return self.realtime_provider if self.realtime_provider != "auto" else detect_provider(self.model_url)

    def as_env(self) -> dict[str, str]:
        """The environment that reproduces this configuration in a child process."""
        return {ENV_PREFIX + s.name.upper(): _text(getattr(self, s.name)) for s in SETTINGS}


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _text(value: object) -> str:
    """A setting's value as the environment carries it (booleans as true/false)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _coerce(setting: Setting, raw: object, source: str) -> object:
    if setting.kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise ConfigError(f"{source}: expected true or false, got {raw!r}")
    if setting.kind is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{source}: expected an integer, got {raw!r}")
        try:
            return int(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: expected an integer, got {raw!r}") from None
    if setting.kind is float:
        if isinstance(raw, bool):
            raise ConfigError(f"{source}: expected a number, got {raw!r}")
        try:
            value = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: expected a number, got {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError(f"{source}: expected a finite number, got {raw!r}")
        return value
    if not isinstance(raw, str):
        raise ConfigError(f"{source}: expected a string, got {raw!r}")
    return raw


def pem_text(name: str, value: str) -> str:
    """A PEM key setting (``vonage_private_key``) as its text: the setting itself, or the file it names;
    ConfigError (naming the setting and the file) for a file that cannot be read."""
    if not value or value.lstrip().startswith("-----BEGIN"):
        return value
    try:
        return Path(value).read_text()
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read {value} ({type(exc).__name__})") from None


def unix_path_of(listen: str) -> str | None:
    """PATH of a "unix:PATH" listen address; None for host:port."""
    return listen[len(UNIX_PREFIX):] if listen.startswith(UNIX_PREFIX) else None


def _validate(values: dict[str, object]) -> None:
    listen = str(values["listen"])
    path = unix_path_of(listen)
    if path is not None:
        if not path.startswith("/"):
            raise ConfigError(f"listen: expected unix:/absolute/path, got {listen!r}")
        if len(os.fsencode(path)) > MAX_UNIX_PATH_BYTES:
            raise ConfigError(f"listen: a Unix socket path has at most {MAX_UNIX_PATH_BYTES} bytes, got {listen!r}")
        if not values["public_url"]:
            raise ConfigError("public_url: required with listen = unix:PATH (the URL Twilio reaches the TLS proxy at)")
    else:
        host, sep, port = listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"listen: expected host:port or unix:/path, got {listen!r}")
    console_listen = str(values["console_listen"])
    if console_listen:
        host, sep, port = console_listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"console_listen: expected host:port or empty, got {console_listen!r}")
        if console_listen == listen:
            raise ConfigError(f"console_listen: the console needs a port of its own, not the gateway's ({listen})")
    _validate_console_origins(str(values["console_origins"]), str(values["console_public_url"]))
    metrics_listen = str(values["metrics_listen"])
    if metrics_listen != METRICS_LOCAL:
        host, sep, port = metrics_listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"metrics_listen: expected local or host:port, got {metrics_listen!r}")
        if metrics_listen in (listen, console_listen):
            raise ConfigError(f"metrics_listen: /metrics needs a port of its own, not the gateway's or the console's ({metrics_listen})")
    if values["console_cookie_secure"] not in ("auto", "always"):
        raise ConfigError(f"console_cookie_secure: expected auto or always, got {values['console_cookie_secure']!r}")
    database_url = str(values["database_url"])
    if database_url and not database_url.startswith(("sqlite:///", "postgresql://")):
        raise ConfigError(f"database_url: expected empty, sqlite:///ABSOLUTE/PATH or postgresql://..., got {database_url!r}")
    webhook_url = str(values["call_webhook_url"])
    if webhook_url and not webhook_url.startswith(("http://", "https://")):
        raise ConfigError(f"call_webhook_url: expected an http:// or https:// URL, got {webhook_url!r}")
    if webhook_url and not values["call_webhook_secret"]:
        raise ConfigError("call_webhook_secret: required with call_webhook_url (receivers verify the signature with it)")
    if not 0 <= int(values["drain_timeout_s"]) <= 86_400:  # type: ignore[arg-type]
        raise ConfigError(f"drain_timeout_s: expected 0..86400 seconds, got {values['drain_timeout_s']}")
    redirect = str(values["drain_redirect_url"])
    if redirect:
        parts = urlsplit(redirect)
        if parts.scheme not in ("http", "https") or not parts.netloc or any(c in redirect for c in "<>\"' \t\r\n"):
            raise ConfigError(f"drain_redirect_url: expected empty or an absolute http:// or https:// URL, got {redirect!r}")
    node_id = str(values["node_id"])
    if node_id and (len(node_id.encode("utf-8")) > 64 or any(c.isspace() for c in node_id) or not node_id.isprintable()):
        raise ConfigError(f"node_id: expected 1-64 bytes, printable, no spaces, got {node_id!r}")
    node_stream_url = str(values["node_stream_url"])
    if node_stream_url:
        parts = urlsplit(node_stream_url)
        if (parts.scheme not in ("ws", "wss", "http", "https") or not parts.netloc or parts.query or parts.fragment
                or any(c in node_stream_url for c in "<>\"' \t\r\n")):
            raise ConfigError(f"node_stream_url: expected empty or an absolute ws(s):// or http(s):// base URL without a query, got {node_stream_url!r}")
    if values["stream_tokens"] not in ("signed", "local"):
        raise ConfigError(f"stream_tokens: expected signed or local, got {values['stream_tokens']!r}")
    token_secret = str(values["token_secret"])
    if token_secret and len(token_secret) < 16:
        raise ConfigError("token_secret: at least 16 characters (or empty: derived from twilio_auth_token)")
    if not 1 <= int(values["tool_processes"]) <= 64:  # type: ignore[arg-type]
        raise ConfigError(f"tool_processes: expected 1..64, got {values['tool_processes']}")
    if not 1 <= int(values["tool_runs_per_call"]) <= 16:  # type: ignore[arg-type]
        raise ConfigError(f"tool_runs_per_call: expected 1..16, got {values['tool_runs_per_call']}")
    if not 10 <= int(values["token_store_timeout_ms"]) <= 5000:  # type: ignore[arg-type]
        raise ConfigError(f"token_store_timeout_ms: expected 10..5000, got {values['token_store_timeout_ms']}")
    for server in filter(None, (s.strip() for s in str(values["fanout_url"]).split(","))):
        parts = urlsplit(server)
        if parts.scheme not in ("nats", "tls") or not parts.netloc:
            raise ConfigError(f"fanout_url: expected empty or nats://host:port (comma-separated), got {server!r}")
    for name in ("telnyx_api_base", "plivo_api_base", "vonage_api_base"):
        if not str(values[name]).startswith(("http://", "https://")):
            raise ConfigError(f"{name}: expected an http:// or https:// base URL, got {values[name]!r}")
    if bool(values["vonage_application_id"]) != bool(values["vonage_private_key"]):
        raise ConfigError("vonage_application_id and vonage_private_key: set both (the JWT needs both) or neither")
    if bool(values["exotel_username"]) != bool(values["exotel_password"]):
        raise ConfigError("exotel_username and exotel_password: set both (Exotel is served with both) or neither")
    if values["telnyx_codec"] not in ("PCMU", "PCMA"):
        raise ConfigError(f"telnyx_codec: expected PCMU or PCMA, got {values['telnyx_codec']!r}")
    if int(values["vonage_sample_rate_hz"]) not in (8000, 16000):  # type: ignore[arg-type]
        raise ConfigError(f"vonage_sample_rate_hz: expected 8000 or 16000, got {values['vonage_sample_rate_hz']}")
    public_key = str(values["telnyx_public_key"])
    if public_key:
        try:
            raw_key = binascii.a2b_base64(public_key, strict_mode=True)
        except ValueError:
            raw_key = b""
        # Telnyx gives the raw 32-byte key in base64; a DER SubjectPublicKeyInfo of one is 44 bytes.
        if len(raw_key) not in (32, 44):
            raise ConfigError("telnyx_public_key: expected the base64 Ed25519 public key from Telnyx's Mission Control")
    if int(values["console_chat_limit"]) < 1:  # type: ignore[arg-type]
        raise ConfigError("console_chat_limit must be at least 1")
    if float(values["console_chat_idle_s"]) <= 0 or int(values["console_chat_sessions"]) < 1:  # type: ignore[arg-type]
        raise ConfigError("console_chat_idle_s must be more than 0 and console_chat_sessions at least 1")
    if int(values["retention_days"]) < 0:  # type: ignore[arg-type]
        raise ConfigError(f"retention_days: expected 0 (keep forever) or more, got {values['retention_days']}")
    if values["realtime_naming"] == "beta":
        raise ConfigError("realtime_naming: the vendor retired the beta Realtime interface in May 2026 (its sessions are "
                          "closed with 4000 beta_api_shape_disabled); use ga, the default")
    if values["realtime_naming"] != "ga":
        raise ConfigError(f"realtime_naming: expected ga, got {values['realtime_naming']!r}")
    if values["realtime_provider"] not in ("auto", "openai", "azure"):
        raise ConfigError(f"realtime_provider: expected auto, openai or azure, got {values['realtime_provider']!r}")
    realtime_url = str(values["realtime_url"])
    if realtime_url:
        parts = urlsplit(realtime_url)
        if parts.scheme not in ("ws", "wss") or not parts.netloc or parts.fragment:
            raise ConfigError(f"realtime_url: expected a ws:// or wss:// URL, got {realtime_url!r}")
    if values["realtime_provider"] == "azure" and not realtime_url:
        raise ConfigError("realtime_provider: azure needs realtime_url (wss://RESOURCE.openai.azure.com/openai/v1/realtime)")
    if not 60 <= int(values["realtime_session_limit_s"]) <= 86_400:  # type: ignore[arg-type]
        raise ConfigError(f"realtime_session_limit_s: expected 60..86400, got {values['realtime_session_limit_s']}")
    if not 10 <= int(values["sim_session_limit_s"]) <= 86_400:  # type: ignore[arg-type]
        raise ConfigError(f"sim_session_limit_s: expected 10..86400, got {values['sim_session_limit_s']}")
    for name in ("max_pending_connections", "max_pending_per_address"):
        if int(values[name]) < 0:  # type: ignore[arg-type]
            raise ConfigError(f"{name}: expected 0 or more, got {values[name]}")
    if not 1 <= int(values["max_calls"]) <= 4096:  # type: ignore[arg-type]
        raise ConfigError(f"max_calls: expected 1..4096, got {values['max_calls']}")
    if not 20 <= int(values["lead_ms"]) <= 1000:  # type: ignore[arg-type]
        raise ConfigError(f"lead_ms: expected 20..1000, got {values['lead_ms']}")
    if not 1 <= int(values["mark_every_frames"]) <= 50:  # type: ignore[arg-type]
        raise ConfigError(f"mark_every_frames: expected 1..50, got {values['mark_every_frames']}")
    if not 1 <= int(values["release_frames"]) <= 4 or (int(values["release_frames"]) - 1) * 20 >= int(values["lead_ms"]):  # type: ignore[arg-type]
        raise ConfigError(f"release_frames: expected 1..4 with (release_frames - 1) * 20 < lead_ms, got {values['release_frames']}")
    if not 0 <= int(values["start_hold_ms"]) <= 1000:  # type: ignore[arg-type]
        raise ConfigError(f"start_hold_ms: expected 0..1000, got {values['start_hold_ms']}")
    # The known-unplayed audio of a steady stream reaches the lead plus its release swing, the checkpoints'
    # spacing (the newest echo confirms only up to its checkpoint) and an echo's way back: a bound below that
    # would hold the pacer back on every stream, not only on a carrier that plays late.
    floor_ms = (int(values["lead_ms"]) + (int(values["release_frames"]) - 1) * 20  # type: ignore[arg-type]
                + int(values["mark_every_frames"]) * 20 + 20)  # type: ignore[arg-type]
    max_unplayed_ms = int(values["plivo_max_unplayed_ms"])  # type: ignore[arg-type]
    if max_unplayed_ms != 0 and not floor_ms <= max_unplayed_ms <= 60_000:
        raise ConfigError(f"plivo_max_unplayed_ms: expected 0 or {floor_ms}..60000 (lead_ms + (release_frames - 1) * 20"
                          f" + mark_every_frames * 20 + 20 at least), got {max_unplayed_ms}")
    if not 0 <= int(values["gate_margin_ms"]) <= 2000:  # type: ignore[arg-type]
        raise ConfigError(f"gate_margin_ms: expected 0..2000, got {values['gate_margin_ms']}")
    if not 0 <= int(values["sim_late_deltas"]) <= 3:  # type: ignore[arg-type]
        raise ConfigError(f"sim_late_deltas: expected 0..3, got {values['sim_late_deltas']}")
    if not 0.0 <= float(values["sim_overlap_probability"]) <= 1.0:  # type: ignore[arg-type]
        raise ConfigError(f"sim_overlap_probability: expected 0..1, got {values['sim_overlap_probability']}")
    if values["call_control"] not in ("auto", "spine", "turns"):
        raise ConfigError(f"call_control: expected auto, spine or turns, got {values['call_control']!r}")
    if values["gate_policy"] not in ("off", "numbers", "scripted", "strict"):
        raise ConfigError(f"gate_policy: expected off, numbers, scripted or strict, got {values['gate_policy']!r}")
    if values["gate_release"] not in ("word", "sentence"):
        raise ConfigError(f"gate_release: expected word or sentence, got {values['gate_release']!r}")
    if not 0 <= int(values["gate_max_chars_per_s"]) <= 100:  # type: ignore[arg-type]
        raise ConfigError(f"gate_max_chars_per_s: expected 0..100, got {values['gate_max_chars_per_s']}")
    if values["gate_language"] not in ("en", "sv", "auto"):
        raise ConfigError(f"gate_language: expected en, sv or auto, got {values['gate_language']!r}")
    if values["retrieve_first"] not in ("on", "off", "auto"):
        raise ConfigError(f"retrieve_first: expected on, off or auto, got {values['retrieve_first']!r}")
    try:
        node_policies(str(values["gate_node_policies"]))
    except ValueError as exc:
        raise ConfigError(f"gate_node_policies: {exc}") from None
    if values["log_format"] not in ("text", "json"):
        raise ConfigError(f"log_format: expected text or json, got {values['log_format']!r}")
    if values["log_level"] not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"log_level: expected debug, info, warning or error, got {values['log_level']!r}")


def _validate_console_origins(origins: str, public_url: str) -> None:
    try:
        allowed = parse_origins(origins)
    except ValueError as exc:
        raise ConfigError(f"console_origins: {exc}") from None
    if not public_url:
        return
    parts = urlsplit(public_url)
    origin = normalize_origin(public_url_origin(public_url)) if parts.scheme in ("http", "https") else None
    if origin is None or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"console_public_url: expected empty or http(s)://host[:port] (the console serves at the "
                          f"root of its host), got {public_url!r}")
    if allowed and origin not in allowed:
        raise ConfigError(f"console_origins: must include console_public_url's origin {origin} (its own pages would be refused)")


def effective_call_control(config: Config) -> str:
    """What call_control means for this configuration, "spine" or "turns" ("auto": turns, for the configured
    agent or the shipped default one: only the turn-taking controller runs an agent's flow and tools, and only
    it tells a backchannel from a turn)."""
    if config.call_control == "auto":
        return "turns"
    return config.call_control


def node_policies(text: str) -> dict[str, str]:
    """``greeting=scripted,answer=numbers`` -> {"greeting": "scripted", "answer": "numbers"}."""
    policies: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        node, sep, policy = part.partition("=")
        node, policy = node.strip(), policy.strip()
        if not sep or not node or policy not in ("off", "numbers", "scripted", "strict"):
            raise ValueError(f"expected node=off|numbers|scripted|strict, got {part!r}")
        policies[node] = policy
    return policies


def forbidden_phrases(text: str) -> dict[str, list[str]]:
    """``as an AI|answer:guarantee`` -> {"*": ["as an AI"], "answer": ["guarantee"]}."""
    phrases: dict[str, list[str]] = {}
    for part in filter(None, (p.strip() for p in text.split("|"))):
        node, sep, phrase = part.partition(":")
        if sep and node.strip() and " " not in node.strip() and phrase.strip():
            phrases.setdefault(node.strip(), []).append(phrase.strip())
        else:
            phrases.setdefault("*", []).append(part)
    return phrases


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
