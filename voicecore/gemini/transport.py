"""How the node reaches Gemini Live: the endpoint (URL, API key header, outbound proxy) and what a close
from the vendor means for the node.

Owns the key's lookup (``GEMINI_API_KEY``, then ``GOOGLE_API_KEY``, as Google's SDK reads them, then the
configuration's ``realtime_api_key``), the URL (``realtime_url`` when set, so the simulator can stand in,
else the Gemini API's endpoint) and the close classification: 1008 (a key refused, a model not served, a
``setup`` the server refuses) is the configuration refused, fatal for every call; any other close is a drop
the call reconnects after, resuming its session. The key goes in the ``x-goog-api-key`` header, not in the
URL, so no log line that names the URL carries it. ``trial_session``: one connection that sends the agent's
``setup`` and waits for ``setupComplete`` or the refusal, as the OpenAI path's trial does with session.update.

Vertex AI (``GeminiAccess``, kind ``vertex``): the same protocol at
``wss://<location>-aiplatform.googleapis.com/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent``
(``global``: ``aiplatform.googleapis.com``), an OAuth 2.0 access token in ``Authorization: Bearer`` (from
Application Default Credentials, voicecore/gemini/vertex_tokens.py) and the model as a resource,
``projects/P/locations/L/publishers/google/models/NAME``, as Google's SDK builds them. Chosen when
``gemini_vertex_project`` is set (or GOOGLE_CLOUD_PROJECT with GOOGLE_GENAI_USE_VERTEXAI=true, as the SDK
reads them); otherwise the Gemini API with a key. ``VertexTokens`` keeps the access token: google-auth's
blocking refresh runs in a thread of its own, never on the model worker's loop (it carries every call's 20 ms
audio); when to refresh is voicecore/gemini/vertex_tokens.py's. A call that finds no token waits for one
refresh, and a refresh that fails is a ``TokenError`` with google-auth's words, which the worker turns into a
log line naming the call and a failed connection (the call's failure policy, as for any other). google-auth
is the optional ``vertex`` extra: imported on first use, its absence a ``TokenError`` naming the extra.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from picows import WSCloseCode, WSError, WSFrame, WSInvalidStatusError, WSListener, WSMsgType, WSTransport, ws_connect

from voicecore.gemini import protocol as gp
from voicecore.gemini.vertex_tokens import CLOUD_PLATFORM_SCOPE, MISSING_EXTRA, TokenError, TokenSchedule
from voicecore.realtime.transport import TRIAL_TIMEOUT_S, Endpoint, TrialResult, proxy_for
from voicecore.realtime.vendor_errors import FATAL, TRANSIENT, VendorFault, classify_handshake

API_KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
API_KEY_HEADER = "x-goog-api-key"
PROVIDER = "gemini"
VERTEX_PROVIDER = "gemini-vertex"
VERTEX_API_VERSION = "v1beta1"
VERTEX_LIVE_PATH = f"/ws/google.cloud.aiplatform.{VERTEX_API_VERSION}.LlmBidiService/BidiGenerateContent"
QUOTA_PROJECT_HEADER = "x-goog-user-project"  # the credentials' quota project, as Google's SDK sends it
_TRUE = frozenset({"true", "1", "yes", "on"})
API_KEY = "api_key"
VERTEX = "vertex"
NO_CREDENTIALS = "none"
_ws_log = logging.getLogger("voicecore.gemini.trial")
_ws_log.setLevel(logging.WARNING)
log = logging.getLogger("voicecore.gemini.vertex")
REFRESH_TIMEOUT_S = 10.0  # one token request, in the token thread


def api_key(environ: Mapping[str, str], configured: str = "") -> str:
    """The Gemini API key: GEMINI_API_KEY, GOOGLE_API_KEY, else the configuration's realtime_api_key."""
    for name in API_KEY_VARIABLES:
        if environ.get(name):
            return environ[name]
    return configured


def live_base_url(realtime_url: str) -> str:
    """``realtime_url`` when set (a simulator, a proxy), else the Gemini API's Live endpoint."""
    return realtime_url or gp.DEFAULT_BASE_URL


def endpoint(realtime_url: str, configured_key: str, environ: Mapping[str, str], call_sid: str | None = None) -> Endpoint:
    """``call_sid``: sent as X-Voicecore-Call (our simulator ties connections to calls by it; only when the
    configuration allows the call's id to go to the vendor, as on the OpenAI path)."""
    url = live_base_url(realtime_url)
    key = api_key(environ, configured_key)
    headers = [(API_KEY_HEADER, key)] if key else []
    if call_sid:
        headers.append(("X-Voicecore-Call", call_sid))
    return Endpoint(url, headers, proxy_for(url, environ), PROVIDER)


def vertex_base_url(location: str) -> str:
    """Vertex AI's Live endpoint for ``location`` (the regional host; ``global`` has none), as the SDK dials it."""
    host = "aiplatform.googleapis.com" if location == "global" else f"{location}-aiplatform.googleapis.com"
    return f"wss://{host}{VERTEX_LIVE_PATH}"


def vertex_model(project: str, location: str, model: str) -> str:
    """The model as Vertex AI names it in ``setup``: projects/P/locations/L/publishers/google/models/NAME."""
    if model.startswith("projects/"):
        return model
    bare = model.removeprefix("models/").removeprefix("publishers/google/models/")
    return f"projects/{project}/locations/{location}/publishers/google/models/{bare}"


@dataclass(frozen=True, slots=True)
class GeminiAccess:
    """How the node reaches Gemini Live: ``kind`` api_key (the Gemini API and its key), vertex (Vertex AI and
    an access token) or none (no credentials: only an explicit ``realtime_url`` can be dialled)."""

    kind: str
    url: str
    api_key: str = ""
    project: str = ""
    location: str = ""

    @property
    def provider(self) -> str:
        return VERTEX_PROVIDER if self.kind == VERTEX else PROVIDER

    def model_name(self, model: str) -> str:
        """``model`` as ``setup`` carries it: the Vertex resource name, or the Gemini API's models/NAME."""
        return vertex_model(self.project, self.location, model) if self.kind == VERTEX else model

    def describe(self) -> str:
        """Which endpoint and credentials, never the key or token (for the start line and log lines)."""
        where = self.url.split("?", 1)[0]
        if self.kind == VERTEX:
            return (f"Vertex AI {where} (project {self.project}, location {self.location}, an access token from "
                    "Application Default Credentials)")
        if self.kind == API_KEY:
            return f"the Gemini API {where} (API key)"
        return f"{where} (no Gemini credentials)"

    def headers(self, token: str = "", quota_project: str = "") -> list[tuple[str, str]]:
        if self.kind == VERTEX:
            headers = [("Authorization", f"Bearer {token}")] if token else []
            if quota_project:
                headers.append((QUOTA_PROJECT_HEADER, quota_project))
            return headers
        return [(API_KEY_HEADER, self.api_key)] if self.api_key else []


def access(realtime_url: str, configured_key: str, environ: Mapping[str, str], vertex_project: str = "",
           vertex_location: str = "") -> GeminiAccess:
    """Vertex AI when a project is set (the setting, else GOOGLE_CLOUD_PROJECT with GOOGLE_GENAI_USE_VERTEXAI
    true; the location: the setting, else GOOGLE_CLOUD_LOCATION, else us-central1), else the Gemini API with
    its key; ``realtime_url``, when set, is dialled instead of Google's endpoint (a simulator, a proxy)."""
    project = vertex_project
    location = vertex_location
    if not project and environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").strip().lower() in _TRUE:
        project = environ.get("GOOGLE_CLOUD_PROJECT", "")
        location = environ.get("GOOGLE_CLOUD_LOCATION", "") or location
    if project:
        location = location or "us-central1"
        return GeminiAccess(VERTEX, realtime_url or vertex_base_url(location), project=project, location=location)
    key = api_key(environ, configured_key)
    return GeminiAccess(API_KEY if key else NO_CREDENTIALS, live_base_url(realtime_url), api_key=key)


def access_for_config(config, environ: Mapping[str, str]) -> GeminiAccess:  # noqa: ANN001 - a Config
    return access(config.realtime_url, config.realtime_api_key, environ, config.gemini_vertex_project,
                  config.gemini_vertex_location)


def endpoint_for_access(target: GeminiAccess, environ: Mapping[str, str], token: str = "", quota_project: str = "",
                        call_sid: str | None = None) -> Endpoint:
    """The endpoint a connection dials: ``token`` is the Vertex access token (unused with a key)."""
    headers = target.headers(token, quota_project)
    if call_sid:
        headers.append(("X-Voicecore-Call", call_sid))
    return Endpoint(target.url, headers, proxy_for(target.url, environ), target.provider)


def classify_close(code: int | None, reason: str) -> VendorFault | None:
    """A close from Gemini: 1008 refuses the configuration (fatal: every call would meet it); None for a
    drop the call reconnects after."""
    if code == gp.CLOSE_POLICY_VIOLATION:
        lowered = reason.lower()
        kind = "auth" if "api key" in lowered or "credential" in lowered else "model" if "not found" in lowered else "session_config"
        return VendorFault(FATAL, kind, str(code), reason.strip() or "the vendor refused the session's setup")
    return None


class _TrialSocket(WSListener):
    def __init__(self, setup_text: str, done: asyncio.Future) -> None:
        self.setup_text = setup_text
        self.done = done

    def _finish(self, fault: VendorFault | None) -> None:
        if not self.done.done():
            self.done.set_result(fault)

    def on_ws_connected(self, transport: WSTransport) -> None:
        transport.send(WSMsgType.TEXT, self.setup_text.encode())

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type is WSMsgType.TEXT:
            if any(isinstance(e, gp.SetupComplete) for e in gp.parse_server_message(frame.get_payload_as_bytes())):
                self._finish(None)
        elif frame.msg_type is WSMsgType.CLOSE:
            code = frame.get_close_code().value
            reason = (frame.get_close_message() or b"").decode("utf-8", errors="replace")
            self._finish(classify_close(code, reason) or VendorFault(
                TRANSIENT, "close", str(code), "the vendor closed the session before setupComplete"))
            if not transport.is_close_frame_sent:
                transport.send_close(WSCloseCode.OK)
            transport.disconnect()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self._finish(VendorFault(TRANSIENT, "close", "disconnected", "the connection ended before setupComplete"))


async def trial_session(target: Endpoint, setup_text: str, timeout_s: float = TRIAL_TIMEOUT_S) -> TrialResult:
    """Open one connection at ``target``, send ``setup_text`` and wait for setupComplete (ok) or the vendor's
    refusal (a close); closed with 1000 either way. Costs no tokens: nothing is asked of the model."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    done: asyncio.Future = loop.create_future()
    transport: WSTransport | None = None
    fault: VendorFault | None
    try:
        async with asyncio.timeout(timeout_s):
            transport, _ = await ws_connect(lambda: _TrialSocket(setup_text, done), target.url,
                                            extra_headers=target.headers, proxy=target.proxy,
                                            websocket_handshake_timeout=timeout_s, logger_name=_ws_log)
            fault = await done
    except WSInvalidStatusError as exc:
        status = exc.response.status if exc.response is not None else 0
        fault = classify_handshake(int(status), exc.raw_body)
    except (OSError, WSError) as exc:
        fault = VendorFault(TRANSIENT, "connect", type(exc).__name__, str(exc) or type(exc).__name__)
    except TimeoutError:
        fault = VendorFault(TRANSIENT, "timeout", "timeout", f"no setupComplete within {timeout_s:g} s")
    finally:
        if transport is not None and not transport.is_disconnected:
            if not transport.is_close_frame_sent:
                transport.send_close(WSCloseCode.OK)
            transport.disconnect()
    return TrialResult(fault is None, fault, loop.time() - started)


def seconds_until(expiry: datetime.datetime | None, now_utc: datetime.datetime) -> float:
    """google-auth's ``credentials.expiry`` (naive UTC; aware in some versions) as seconds from ``now_utc``."""
    if expiry is None:
        return 3600.0  # credentials that do not say: Google's tokens live an hour
    if expiry.tzinfo is None:
        expiry = expiry.replace(tzinfo=datetime.timezone.utc)
    return (expiry - now_utc).total_seconds()


def load_credentials() -> Any:
    """Application Default Credentials with the cloud-platform scope (GOOGLE_APPLICATION_CREDENTIALS: a
    service account's JSON key; else gcloud's ADC file, else the metadata server). Blocking."""
    try:
        import google.auth
        import google.auth.exceptions
    except ImportError:
        raise TokenError(MISSING_EXTRA) from None
    try:
        credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except google.auth.exceptions.GoogleAuthError as exc:
        raise TokenError(f"no Application Default Credentials: {exc}") from None
    return credentials


def refresh_blocking(credentials: Any) -> tuple[str, float]:
    """One refresh (an HTTPS POST to the credentials' token endpoint): the token and its lifetime in seconds."""
    try:
        import google.auth.exceptions
        import google.auth.transport.requests
    except ImportError:
        raise TokenError(MISSING_EXTRA) from None
    request = google.auth.transport.requests.Request()

    def bounded(*args: Any, **kwargs: Any) -> Any:  # google-auth's own default waits 120 s for the token endpoint
        kwargs.setdefault("timeout", REFRESH_TIMEOUT_S)
        return request(*args, **kwargs)

    try:
        credentials.refresh(bounded)
    except google.auth.exceptions.GoogleAuthError as exc:
        raise TokenError(f"the token endpoint refused or could not be reached: {exc}") from None
    if not credentials.token:
        raise TokenError("the token endpoint answered without an access token")
    return credentials.token, seconds_until(credentials.expiry, datetime.datetime.now(datetime.timezone.utc))


class VertexTokens:
    """The node's Vertex AI access token: ``token()`` for a connection about to be opened, ``keep_fresh()``
    as a background task, ``current()`` for a synchronous caller (what is usable now, else "")."""

    def __init__(self, load: Callable[[], Any] = load_credentials,
                 refresh: Callable[[Any], tuple[str, float]] = refresh_blocking,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._load = load
        self._refresh_blocking = refresh
        self._clock = clock
        self._credentials: Any = None
        self.schedule = TokenSchedule()
        self.quota_project = ""
        self._in_flight: asyncio.Future | None = None
        # one thread: refreshes never run two at once, and never on the event loop
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="vertex-token")

    def current(self) -> str:
        return self.schedule.token if self.schedule.usable(self._clock()) else ""

    def _fetch(self) -> tuple[str, float]:
        if self._credentials is None:
            self._credentials = self._load()
            self.quota_project = getattr(self._credentials, "quota_project_id", None) or ""
        return self._refresh_blocking(self._credentials)

    async def refresh(self) -> str:
        """One refresh in the token thread, shared by every caller that asks while it runs. Raises TokenError."""
        if self._in_flight is None or self._in_flight.done():
            self._in_flight = asyncio.ensure_future(self._refresh_once())
        return await asyncio.shield(self._in_flight)

    async def _refresh_once(self) -> str:
        loop = asyncio.get_running_loop()
        try:
            token, lifetime_s = await loop.run_in_executor(self._thread, self._fetch)
        except TokenError as exc:
            self.schedule.failed(str(exc), self._clock())
            raise
        except Exception as exc:  # noqa: BLE001 - a library's surprise is still a failed refresh, said as such
            self.schedule.failed(f"{type(exc).__name__}: {exc}", self._clock())
            raise TokenError(f"{type(exc).__name__}: {exc}") from None
        self.schedule.refreshed(token, lifetime_s, self._clock())
        return token

    async def token(self, timeout_s: float | None = None) -> str:
        """A token usable for a new connection: the current one, else one refresh's (waited for at most
        ``timeout_s``; the refresh itself goes on for the next caller). Raises TokenError."""
        current = self.current()
        if current:
            return current
        try:
            return await asyncio.wait_for(self.refresh(), timeout_s)
        except TimeoutError:
            raise TokenError(f"no access token from the token endpoint within {timeout_s:g} s") from None

    async def keep_fresh(self, stop: asyncio.Event | None = None) -> None:
        """Refresh ahead of expiry until ``stop``; a failure is logged once per try and retried after a pause."""
        while stop is None or not stop.is_set():
            delay = max(0.0, self.schedule.refresh_due_at_s() - self._clock())
            if delay > 0:
                try:
                    if stop is None:
                        await asyncio.sleep(delay)
                    else:
                        await asyncio.wait_for(stop.wait(), delay)
                        return
                except TimeoutError:
                    pass
                continue
            try:
                await self.refresh()
            except TokenError as exc:
                pause = self.schedule.retry_at_s - self._clock()
                log.error("Vertex AI access token refresh failed (%s); retrying in %.0f s%s", exc, max(0.0, pause),
                          "" if self.current() else ": calls that connect now get their failure policy",
                          extra={"problem": "vendor"})

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
