"""The console process: the call list and call pages, their JSON API, and the ``/observe`` WebSocket, on
the console's own port (``console_listen``, never the gateway's).

Owns the console's HTTP routes and the fan-out of live events to observers. Reads the call store (the
recorder is its one writer; API keys are added with ``voicecore console-key``) and the record files (a
call's audio), and subscribes to the recorder's numbered events:
  SUB  observe.sock  <- recorder (observed.events)
  NATS fanout_url    <- the other nodes' recorders: their calls' events (voicecore/observe/fleet.py), when set
  PUSH gateway.sock  -> heartbeat every 150 ms, stats every second, as process "console"
A call is never slowed by an observer: the recorder's PUB drops what a slow console does not take, and
each observer has a bounded queue (voicecore/console/fanout.py); an observer whose queue fills is closed
(1008, "observer too slow"). Store queries run on one thread (the store's connection is not shared between
threads at once), replays for audio on another; the event loop only routes and fans out.

``/chat`` and ``POST /chat/messages``: the text channel, conversations with the node's agent over a WebSocket or
one message per request, authenticated as ``/observe`` is (workers/chat/endpoint.py owns their messages, sessions
and limits). Request bodies are read by voicecore/console/bodies.py (Content-Length only, at most 16 KiB).

``/observe?call=SID&since=SEQ``: the call's events after SEQ from the store, then live, each ``seq`` once
and in order (the recorder stores before it publishes, so the two meet without a gap). Without ``call``:
every live call's events as they happen, no replay. Close codes: 1008 too slow, 1001 console stopping.
Before the upgrade: 403 from a browser page of another origin (voicecore/console/guard.py), 401 without a
valid key, 404 for a call neither stored nor live, 400 for a bad query.

The JSON API's list (``/api/calls``) takes the filters of voicecore/store/query.py (date, outcome, agent,
carrier, direction, a search for a call id or transcript words, a latency floor, errors and barge-ins only)
and pages by a marker (``cursor``, from the previous page's ``next``); ``/api/export`` is the same list, all
of it (up to 100,000 calls), as CSV or JSON (voicecore/console/export.py). A call's detail adds what its page
shows on the call's audio clock (voicecore/console/callview.py).

Browser requests are checked before anything else: the JSON API and ``/observe`` refuse a request whose
Origin is not one of ``console_origins`` (403, one log line naming it), so a page of another port of the
same host cannot use the operator's session cookie, which cookies' same-site rule sends it. The session and
log-out endpoints are POSTs. A call's ``audio.wav`` and ``audio.opus`` (the same as Opus in Ogg, a sixth to a
ninth of the size, for long calls) answer byte ranges (seeking) and, once the call is over, are cacheable by the
browser (``private``, with an ETag) (voicecore/console/ranges.py).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import signal
import stat
import time
import urllib.parse
from pathlib import Path
from typing import Any

import orjson
import zmq
import zmq.asyncio
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from voicecore import timing
from voicecore.bus import messages
from voicecore.bus.transport import GATEWAY_INBOX, OBSERVE_FEED, Bus
from voicecore.config import Config, load_config
from voicecore.console import auth, callview, export, guard, media, ranges
from voicecore.chat.sessions import Refused
from voicecore.console.bodies import BodyRequest, body_reading
from voicecore.console.fanout import FanOut, Observer
from voicecore.logs import run_loop, setup_logging
from voicecore.observe.numbering import rows_from_json, wire_stored
from voicecore.observe.transport import FleetSubscription
from voicecore.store import CallStore, database_url_for
from voicecore.store.db import is_unavailable
from voicecore.store.query import CallFilter, QueryError
from workers.chat.endpoint import ChatEndpoint
from workers.console.campaigns import CampaignRefused, ConsoleCampaigns

log = logging.getLogger("voicecore.console")

PROCESS = "console"
STATIC_DIR = Path(__file__).resolve().parents[2] / "voicecore" / "console" / "static"
MEDIA_CACHE = 16  # calls whose audio is kept (a replay per call otherwise)...
MEDIA_CACHE_BYTES = 96 << 20  # ...within this much memory (a 10-minute call's tracks and WAV: about 29 MiB)
OPUS_CACHE = 16  # Opus renditions kept (encoding takes about 1 s per minute of call; a 10-minute one is ~3 MiB)
PAGES = {"/": "index.html", "/login": "login.html", "/live": "live.html", "/campaigns": "campaigns.html"}
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
SECURITY_HEADERS = (("X-Content-Type-Options", "nosniff"),
                    ("Content-Security-Policy", "default-src 'self'; connect-src 'self'; media-src 'self'; img-src 'self' data:"),
                    ("Referrer-Policy", "no-referrer"), ("X-Frame-Options", "DENY"))
REASONS = {200: "OK", 204: "No Content", 206: "Partial Content", 304: "Not Modified", 400: "Bad Request",
           401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 409: "Conflict",
           411: "Length Required", 413: "Content Too Large", 416: "Range Not Satisfiable", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}
POSTS = ("/api/session", "/api/logout", "/chat/messages")  # the requests that change state: POST only
FINISHED_AUDIO_CACHE = "private, no-cache"  # the browser keeps it and asks with If-None-Match (304) each time
EXPORT_PAGE = 1000  # calls per store query while exporting
EXPORT_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json"}
MAX_SEARCH_CHARS = 200
Headerlist = tuple[tuple[str, str], ...]


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: Headerlist = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def respond(status: int, body: bytes, content_type: str, extra: Headerlist = ()) -> Response:
    """A response with the console's security headers; ``no-store`` unless ``extra`` says how to cache it."""
    cache = () if any(name == "Cache-Control" for name, _ in extra) else (("Cache-Control", "no-store"),)
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(body))), *SECURITY_HEADERS, *cache, *extra])
    return Response(status, REASONS.get(status, "Error"), headers, body)


def respond_json(value: Any, status: int = 200, extra: Headerlist = ()) -> Response:
    return respond(status, orjson.dumps(value), "application/json", extra)


def printable(text: str) -> str:
    """``text`` for a log line: as it is, or quoted with its escapes when it holds control characters."""
    return text if text.isprintable() else repr(text)


def header(request: Request, name: str) -> str | None:
    """One header's value; several of the same name joined (as RFC 9110 allows for lists); None when absent."""
    values = request.headers.get_all(name)
    return ", ".join(values) if values else None


def query_number(query: dict[str, list[str]], name: str, default: float | None = None) -> float | None:
    values = query.get(name)
    if not values or values[0] == "":
        return default
    try:
        number = float(values[0])
    except ValueError:
        raise HttpError(400, f"{name}: expected a number, got {values[0][:40]!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise HttpError(400, f"{name}: expected a number, got {values[0][:40]!r}")
    return number


def query_text(query: dict[str, list[str]], name: str) -> str:
    return (query.get(name) or [""])[0]


def query_flag(query: dict[str, list[str]], name: str) -> bool:
    value = query_text(query, name).lower()
    if value in ("", "0", "false"):
        return False
    if value in ("1", "true"):
        return True
    raise HttpError(400, f"{name}: expected 1 or 0, got {value[:40]!r}")


def call_filter(query: dict[str, list[str]]) -> CallFilter:
    """The list's filters from a request's query (voicecore/store/query.py); 400 for one that is not valid."""
    min_latency = query_number(query, "min_latency_ms")
    if min_latency is not None and min_latency < 0:
        raise HttpError(400, "min_latency_ms: a number of milliseconds >= 0")
    search = query_text(query, "q").strip()
    if len(search) > MAX_SEARCH_CHARS:
        raise HttpError(400, f"q: at most {MAX_SEARCH_CHARS} characters")
    return CallFilter(
        since_s=query_number(query, "since"), until_s=query_number(query, "until"),
        outcome=query_text(query, "outcome") or None, agent=(query.get("agent") or [None])[0],
        carrier=query_text(query, "carrier") or None, direction=query_text(query, "direction") or None, search=search,
        min_latency_ms=None if min_latency is None else int(min_latency), errors=query_flag(query, "errors"),
        bargeins=query_flag(query, "bargeins"))


class Console:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.url = database_url_for(config)
        self.record_dir = Path(config.record_dir) if config.record_dir else None
        self.runtime_dir = Path(config.runtime_dir)
        self.bus = Bus(self.runtime_dir)
        self.gateway = self.bus.connect(zmq.PUSH, GATEWAY_INBOX)
        self.store: CallStore | None = None
        self.store_failing = False  # the last store use found it unreachable (logged once per outage)
        self.store_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="console-store")
        self.media_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="console-media")
        # (record file, its mtime and size) -> its audio: a record that changes is read again
        self.media_cache: collections.OrderedDict[tuple[str, int, int], media.Recording] = collections.OrderedDict()
        # the WAV's entity tag -> its Opus encoding, done once however many requests ask for it at once
        self.opus_cache: collections.OrderedDict[str, asyncio.Future[media.Rendition]] = collections.OrderedDict()
        self.origins = guard.console_origins(config.console_origins, config.console_listen, config.console_public_url)
        self.cookie_secure = auth.cookie_is_secure(config.console_cookie_secure, config.console_public_url)
        port = int(config.console_listen.rpartition(":")[2] or 0) if config.console_listen else 0
        self.cookie = auth.cookie_name(port, self.cookie_secure)
        self.sessions = auth.Sessions(self.check_key_blocking)
        self.key_cache: dict[str, tuple[str | None, float]] = {}  # key -> (name, checked at): a key per request, not a query
        self.fanout = FanOut()
        self.live = self.fanout.live  # call sid -> when its call.started arrived (calls in progress)
        self.counters = collections.Counter({name: 0 for name in (
            "requests", "unauthorized", "forbidden", "not_found", "bad_requests", "errors", "observers_opened",
            "events_sent", "feed_rejected", "audio_ranges", "audio_not_modified")})
        self.heartbeat_seq = 0
        # fanout_url: the other nodes' calls' events too, from the fleet subject (NATS)
        self.fleet = FleetSubscription(config.fanout_url, config.node, self.fanout.publish) if config.fanout_url else None
        # /chat: the text channel (workers/chat/endpoint.py); each conversation is stored as a call when it ends
        self.chat = ChatEndpoint(config, keep=lambda summary: self.on_store(lambda store: store.ingest(summary)))
        # POST /api/campaigns: campaigns run in this process with `voicecore campaign run`'s engine (campaigns.py)
        self.campaigns = ConsoleCampaigns(config, self.url)

    # --- the store, on its thread ----------------------------------------------------------------------
    def _store(self) -> CallStore:
        if self.store is None:
            self.store = CallStore.open(self.url)
        return self.store

    async def query(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self.on_store(lambda store: getattr(store, method)(*args, **kwargs))

    async def on_store(self, work: Any) -> Any:
        """``work(store)`` on the store's thread. A store that cannot be reached (PostgreSQL restarting) is
        HTTP 503 to the request, logged once until the store answers again."""
        def run() -> Any:
            try:
                result = work(self._store())
            except Exception as exc:
                if self.store is not None:  # a broken connection: the next query opens a new one
                    try:
                        self.store.close()
                    except Exception:  # noqa: BLE001
                        pass
                    self.store = None
                if not is_unavailable(exc):
                    raise
                if not self.store_failing:
                    self.store_failing = True
                    log.warning("console: the call store cannot be reached (%s: %s); answering 503 until it can",
                                type(exc).__name__, str(exc).strip(), extra={"problem": "store"})
                raise HttpError(503, "the call store is unavailable; try again shortly", (("Retry-After", "5"),)) from None
            if self.store_failing:
                self.store_failing = False
                log.info("console: the call store answers again")
            return result
        return await asyncio.get_running_loop().run_in_executor(self.store_thread, run)

    def check_key_blocking(self, key: str) -> str | None:
        """For the session table's re-checks, which run on the loop: answered from the key cache, which
        ``check_key`` (the loop's way in) keeps fresh."""
        name, _checked = self.key_cache.get(key, (None, 0.0))
        return name

    async def check_key(self, key: str) -> str | None:
        now = time.monotonic()
        cached = self.key_cache.get(key)
        if cached is not None and now - cached[1] < auth.RECHECK_S:
            return cached[0]
        name = await self.query("api_key_name", key)
        if len(self.key_cache) > 10_000:
            self.key_cache.clear()
        self.key_cache[key] = (name, now)
        return name

    async def who(self, request: Request) -> str | None:
        headers = {k.lower(): v for k, v in request.headers.raw_items()}
        key = auth.key_from_headers(headers)
        if key:
            return await self.check_key(key)
        token = auth.cookie_value(headers.get("cookie", ""), self.cookie)
        session = self.sessions.sessions.get(token) if token else None
        if session is not None and time.time() - session.checked_s >= auth.RECHECK_S:
            await self.check_key(session.key)  # refresh the cache the session's re-check reads
        return self.sessions.who(token, time.time())

    # --- HTTP -----------------------------------------------------------------------------------------------
    async def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        self.counters["requests"] += 1
        parsed = urllib.parse.urlsplit(request.path)
        path, query = parsed.path, urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        try:
            self.check_method(request.method, path)
            if path in ("/observe", "/chat", "/chat/messages") or path.startswith("/api/"):
                self.check_origin(request, path)
            if path == "/observe":
                return await self.before_observe(request, query)
            if path == "/chat":
                return await self.before_chat(request, query)
            if path == "/chat/messages":
                response = await self.chat_message(request)
            else:
                response = await self.route(request, path, query)
        except HttpError as exc:
            counter = {401: "unauthorized", 403: "forbidden", 404: "not_found", 400: "bad_requests", 405: "bad_requests",
                       409: "bad_requests", 411: "bad_requests", 413: "bad_requests", 416: "bad_requests",
                       429: "bad_requests"}.get(exc.status, "errors")
            self.counters[counter] += 1
            response = respond_json({"error": exc.message}, exc.status, exc.headers)
        except Exception:
            self.counters["errors"] += 1
            log.exception("console: %s failed", path)
            response = respond_json({"error": "internal error"}, 500)
        if request.method == "HEAD":  # what a GET would answer, without its body
            return Response(response.status_code, response.reason_phrase, response.headers, b"")
        return response

    @staticmethod
    def check_method(method: str, path: str) -> None:
        allowed = ("POST",) if path in POSTS else ("GET",) if path in ("/observe", "/chat") else ("GET", "HEAD")
        if path in ("/api/calls", "/api/campaigns"):  # the list, and placing a call or starting a campaign
            allowed = ("GET", "HEAD", "POST")
        if path.startswith("/api/campaigns/") and path.endswith("/stop"):
            allowed = ("POST",)
        if method not in allowed:
            raise HttpError(405, f"{method[:20]} is not served at {path[:100]}: {' or '.join(allowed)}",
                            (("Allow", ", ".join(allowed)),))

    def check_origin(self, request: Request, path: str) -> None:
        """403 for a browser request the console's origins do not cover (voicecore/console/guard.py)."""
        origin = header(request, "Origin")
        with_cookie = bool(auth.cookie_value(header(request, "Cookie") or "", self.cookie))
        facts = guard.RequestFacts(
            method=request.method, origin=origin, fetch_site=(header(request, "Sec-Fetch-Site") or "").strip().lower(),
            has_key=bool(auth.key_from_headers({k.lower(): v for k, v in request.headers.raw_items()})),
            has_cookie=with_cookie, websocket=path in ("/observe", "/chat"))
        reason = guard.refusal(facts, self.origins, changes_state=path in POSTS or request.method == "POST")
        if reason is None:
            return
        log.warning("console: refused %s %s from origin %s%s: %s", printable(request.method[:20]), printable(path[:100]),
                    repr(origin[:200]) if origin is not None else "(none)", " with a session cookie" if with_cookie else "",
                    reason)
        raise HttpError(403, f"{reason}; the console's origins: {', '.join(self.origins)} (VOICECORE_CONSOLE_ORIGINS)")

    async def route(self, request: Request, path: str, query: dict[str, list[str]]) -> Response:
        if path == "/healthz":
            return respond_json({"ok": True, "live_calls": len(self.live), "observers": self.observer_count()})
        if path == "/login":
            for value in query.get("next", []):
                if guard.next_path(value) is None:
                    log.warning("console: refused /login with next %r: not a path on this console", value[:200])
                    raise HttpError(400, "next: not a path on this console (this link would send you to another site "
                                         "after you log in)")
            return self.static("login.html")
        if path in PAGES:
            return self.static(PAGES[path])
        if path.startswith("/calls/") and path.count("/") == 2:
            return self.static("call.html")
        if path.startswith("/campaigns/") and path.count("/") == 2:
            return self.static("campaign.html")
        if path.startswith("/static/"):
            return self.static(path.removeprefix("/static/"))
        if path == "/api/session":
            return await self.open_session(request)
        if path == "/api/logout":
            self.sessions.close(auth.cookie_value(header(request, "Cookie") or "", self.cookie))
            return respond(204, b"", "text/plain", (("Set-Cookie", auth.set_cookie(self.cookie, "", 0, self.cookie_secure)),))
        if not path.startswith("/api/"):
            raise HttpError(404, "no such page")
        if await self.who(request) is None:
            raise HttpError(401, "an API key is needed (Authorization: Bearer KEY), or a session from /login")
        if path == "/api/calls" and request.method == "POST":
            return await self.place_call(request)
        if path == "/api/calls":
            return await self.api_calls(query)
        if path == "/api/export":
            return await self.api_export(query)
        if path == "/api/live":
            return respond_json({"calls": await self.live_calls()})
        if path == "/api/campaigns" or path.startswith("/api/campaigns/"):
            return await self.api_campaigns(request, path, query)
        parts = path.split("/")  # "", "api", "calls", SID, [what]
        if len(parts) in (4, 5) and parts[2] == "calls" and parts[3]:
            call_sid, what = parts[3], parts[4] if len(parts) == 5 else ""
            if what == "":
                return await self.api_call(call_sid)
            if what == "events":
                since = int(query_number(query, "since", 0) or 0)
                events = await self.query("events", call_sid, since)
                return respond(200, b"[" + b",".join(wire_stored(e) for e in events) + b"]", "application/json")
            if what == "waveform":
                points = int(query_number(query, "points", 800) or 800)
                recording = await self.call_media(call_sid)
                return respond_json(media.waveform(recording.caller, recording.agent, points))
            if what == "audio.wav":
                recording = await self.call_media(call_sid)
                return self.audio(request, call_sid, recording.wav_rendition)
            if what == "audio.opus":
                return self.audio(request, call_sid, await self.call_opus(call_sid))
        raise HttpError(404, "no such API path")

    def audio(self, request: Request, call_sid: str, rendition: media.Rendition) -> Response:
        """The recording (WAV or Opus): one byte range when asked (206; 416 past its end), the whole otherwise. A
        call still going on may have more to come (no-store); a finished one's is the same bytes each time (ETag)."""
        body, content_type = rendition.body, rendition.content_type
        live = call_sid in self.live
        etag = None if live else rendition.etag
        common: Headerlist = (("Accept-Ranges", "bytes"), ("Cache-Control", "no-store" if live else FINISHED_AUDIO_CACHE),
                              *((("ETag", etag),) if etag else ()))
        if ranges.none_match(header(request, "If-None-Match"), etag):
            self.counters["audio_not_modified"] += 1
            return Response(304, REASONS[304], Headers([*SECURITY_HEADERS, *common]), b"")
        wanted = None
        if request.method == "GET" and ranges.range_applies(header(request, "If-Range"), etag):
            wanted = ranges.byte_range(header(request, "Range"), len(body))
        if wanted == ranges.UNSATISFIABLE:
            raise HttpError(416, f"the range is past the recording's end ({len(body)} bytes)",
                            (("Content-Range", f"bytes */{len(body)}"), *common))
        if isinstance(wanted, ranges.ByteRange):
            self.counters["audio_ranges"] += 1
            return respond(206, body[wanted.first:wanted.last + 1], content_type,
                           (("Content-Range", wanted.content_range(len(body))), *common))
        return respond(200, body, content_type, common)

    def static(self, name: str) -> Response:
        file = (STATIC_DIR / name).resolve()
        if STATIC_DIR.resolve() not in file.parents or not file.is_file() or file.suffix not in CONTENT_TYPES:
            raise HttpError(404, "no such file")
        return respond(200, file.read_bytes(), CONTENT_TYPES[file.suffix])

    async def open_session(self, request: Request) -> Response:
        key = auth.key_from_headers({k.lower(): v for k, v in request.headers.raw_items()})
        name = await self.check_key(key) if key else None
        if name is None:
            raise HttpError(401, "that API key is not valid")
        opened = self.sessions.open(key, time.time())
        assert opened is not None  # the key cache just said it is valid
        token, name = opened
        cookie = auth.set_cookie(self.cookie, token, auth.SESSION_TTL_S, self.cookie_secure)
        return respond_json({"name": name}, 200, (("Set-Cookie", cookie),))

    async def api_calls(self, query: dict[str, list[str]]) -> Response:
        """A page of the list, newest first: ``calls``, ``next`` (the marker of the next page, or null), ``total``
        (the calls the filters match), ``agents`` and ``carriers`` (what the filters offer)."""
        limit = int(query_number(query, "limit", 100) or 100)
        if not 1 <= limit <= 1000:
            raise HttpError(400, "limit: 1-1000")
        filter_ = call_filter(query)
        after = query_text(query, "cursor") or None

        def page(store: CallStore) -> dict[str, Any]:
            rows = store.calls(filter=filter_, limit=limit + 1, after=after)
            more = len(rows) > limit
            rows = rows[:limit]
            return {"calls": [self.list_row(row) for row in rows], "agents": store.agents(), "carriers": store.carriers(),
                    "next": rows[-1]["cursor"] if more else None, "total": store.count_calls(filter_)}

        try:
            return respond_json(await self.on_store(page))
        except QueryError as exc:
            raise HttpError(400, str(exc)) from None

    @staticmethod
    def list_row(row: dict[str, Any]) -> dict[str, Any]:
        return {**{k: v for k, v in row.items() if k != "cursor"}, "outcome_text": export.export_row(row)["outcome_text"]}

    async def api_export(self, query: dict[str, list[str]]) -> Response:
        """Every call the filters match (at most MAX_EXPORT_ROWS, newest first) as a CSV or JSON file."""
        kind = query_text(query, "format") or "csv"
        if kind not in EXPORT_TYPES:
            raise HttpError(400, f"format: csv or json, got {kind[:20]!r}")
        filter_ = call_filter(query)

        def everything(store: CallStore) -> tuple[bytes, int, bool]:
            rows: list[dict[str, Any]] = []
            after = None
            while len(rows) < export.MAX_EXPORT_ROWS:
                page = store.calls(filter=filter_, limit=EXPORT_PAGE, after=after)
                rows.extend(page)
                if len(page) < EXPORT_PAGE:
                    break
                after = page[-1]["cursor"]
            truncated = len(rows) > export.MAX_EXPORT_ROWS or (
                len(rows) == export.MAX_EXPORT_ROWS and bool(store.calls(filter=filter_, limit=1, after=rows[-1]["cursor"])))
            rows = rows[:export.MAX_EXPORT_ROWS]
            body = export.to_csv(rows) if kind == "csv" else export.to_json(rows)
            return body, len(rows), truncated

        body, count, truncated = await self.on_store(everything)
        name = export.filename(kind, time.time())
        return respond(200, body, EXPORT_TYPES[kind], (("Content-Disposition", f'attachment; filename="{name}"'),
                                                       ("X-Voicecore-Rows", str(count)),
                                                       ("X-Voicecore-Truncated", "true" if truncated else "false")))

    async def api_call(self, call_sid: str) -> Response:
        call = await self.query("call", call_sid)
        live = call_sid in self.live
        if call is None and not live:
            if await self.query("last_seq", call_sid) == 0:
                raise HttpError(404, "no such call")
        return respond_json({"call_sid": call_sid, "live": live, "stored": call is not None,
                             "call": callview.enrich(call) if call is not None else None,
                             "last_seq": await self.query("last_seq", call_sid)})

    async def live_calls(self) -> list[dict[str, Any]]:
        stored = await self.query("live_calls")
        known = {c["call_sid"] for c in stored}
        stored.extend({"call_sid": sid, "started_at": at, "last_at": at, "events": 0, "agent": ""}
                      for sid, at in self.live.items() if sid not in known)
        return [c for c in stored if c["call_sid"] in self.live or time.time() - c["last_at"] < 60]

    async def call_media(self, call_sid: str) -> media.Recording:
        call = await self.query("call", call_sid)
        if call is None or self.record_dir is None:
            raise HttpError(404, "no stored call with a record")
        source = str(call["source"])
        path = self.record_dir / source
        try:
            status = path.stat()
        except OSError:
            status = None
        if status is None or not stat.S_ISREG(status.st_mode):
            raise HttpError(404, "the call's record is gone (retention)")
        key = (source, status.st_mtime_ns, status.st_size)
        cached = self.media_cache.get(key)
        if cached is not None:
            self.media_cache.move_to_end(key)
            return cached
        recording = await asyncio.get_running_loop().run_in_executor(self.media_thread, media.recording, path)
        self.media_cache[key] = recording
        while len(self.media_cache) > 1 and (len(self.media_cache) > MEDIA_CACHE or sum(
                r.size_bytes for r in self.media_cache.values()) > MEDIA_CACHE_BYTES):
            self.media_cache.popitem(last=False)
        return recording

    async def call_opus(self, call_sid: str) -> media.Rendition:
        """The call's recording as Opus, encoded once per version of its audio (off the loop) and kept."""
        recording = await self.call_media(call_sid)
        if not recording.caller and not recording.agent:
            raise HttpError(404, "the call's record holds no audio")
        encoding = self.opus_cache.get(recording.etag)
        if encoding is None or (encoding.done() and encoding.exception() is not None):
            encoding = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(
                self.media_thread, media.opus_rendition, recording.caller, recording.agent))
            self.opus_cache[recording.etag] = encoding
            while len(self.opus_cache) > OPUS_CACHE:
                self.opus_cache.popitem(last=False)
        self.opus_cache.move_to_end(recording.etag)
        return await asyncio.shield(encoding)

    # --- /observe --------------------------------------------------------------------------------------------
    async def before_observe(self, request: Request, query: dict[str, list[str]]) -> Response | None:
        if await self.who(request) is None:
            raise HttpError(401, "an API key is needed (Authorization: Bearer KEY), or a session from /login")
        call_sid = (query.get("call") or [""])[0]
        since = query_number(query, "since", 0)
        if since is None or since < 0 or since != int(since):
            raise HttpError(400, "since: a whole number >= 0")
        if call_sid and call_sid not in self.live and await self.query("last_seq", call_sid) == 0:
            raise HttpError(404, "no such call")
        return None  # on with the upgrade

    async def before_chat(self, request: Request, query: dict[str, list[str]]) -> Response | None:
        """``/chat?session=ID`` continues that session (404 gone or never was, 409 in use); without it, a new one
        (503 when console_chat_sessions are open)."""
        key_name = await self.who(request)
        if key_name is None:
            raise HttpError(401, "an API key is needed (Authorization: Bearer KEY), or a session from /login")
        if not self.chat.available:
            raise HttpError(503, f"no agent to chat with: {self.chat.problem}")
        try:
            self.chat.check_resume(query_text(query, "session"), key_name)
        except Refused as exc:
            raise HttpError(exc.status, exc.message) from None
        return None  # on with the upgrade

    async def place_call(self, request: Request) -> Response:
        """``POST /api/calls`` (an API key or a session): place one outbound call from this node through the
        carrier's API (voicecore/outbound/call_command.py). Body: {"to", "from", "fields"?, "carrier"? (twilio, the
        default, plivo, telnyx or vonage)}; 201 with the
        call's sid, 400 for a body that cannot be placed, 503 when the node has no carrier account to place with,
        502 when the carrier refused."""
        from voicecore.outbound import dial
        from voicecore.outbound.call_command import place
        from voicecore.outbound.campaign_file import normalise_number

        key_name = await self.who(request)
        assert isinstance(request, BodyRequest)
        if request.refusal is not None:
            raise HttpError(*request.refusal)
        if request.content_length is None:
            raise HttpError(411, "send the JSON body with a Content-Length")
        try:
            body = orjson.loads(request.body or b"null")
        except ValueError:
            raise HttpError(400, "the body is not JSON") from None
        if not isinstance(body, dict) or not isinstance(body.get("to"), str) or not isinstance(body.get("from"), str):
            raise HttpError(400, 'expected {"to": "+E164", "from": "+E164", "fields": {"name": "value"}}')
        fields = body.get("fields", {})
        if not isinstance(fields, dict) or not all(isinstance(v, str) for v in fields.values()):
            raise HttpError(400, "fields: an object of strings")
        carrier = body.get("carrier", "twilio")
        if carrier not in dial.CARRIERS:
            raise HttpError(400, f"carrier: one of {', '.join(dial.CARRIERS)}")
        try:
            dial.credentials(self.config, carrier)
        except ValueError as exc:
            raise HttpError(503, f"this node has no {carrier} account to place calls with: {exc}") from None
        try:
            to, from_ = normalise_number(body["to"]), normalise_number(body["from"])
            outcome = await place(self.config, to, from_, fields, carrier)
        except ValueError as exc:
            raise HttpError(400, str(exc)[:300]) from None
        if not outcome["ok"]:
            log.warning("console: key %s: the carrier refused a call: %s", key_name, outcome["error"])
            raise HttpError(502, f"the carrier refused the call: {outcome['error']}")
        log.info("console: key %s placed call %s", key_name, outcome["call_sid"])
        return respond_json({"call_sid": outcome["call_sid"], "status": outcome["status"]}, 201)

    async def api_campaigns(self, request: Request, path: str, query: dict[str, list[str]]) -> Response:
        """``POST /api/campaigns`` (start, or resume one of the same name: 202), ``GET /api/campaigns`` (each with its
        progress), ``GET /api/campaigns/{id}`` (with its latest attempts), ``POST /api/campaigns/{id}/stop``. A file
        with problems: 400 listing every one, nothing dialled (workers/console/campaigns.py)."""
        from voicecore.outbound.campaign_request import RequestError, read_request

        parts = path.split("/")  # "", "api", "campaigns", [ID], ["stop"]
        try:
            if len(parts) == 3 and request.method == "POST":
                key_name = await self.who(request)
                assert isinstance(request, BodyRequest)
                if request.refusal is not None:
                    raise HttpError(*request.refusal)
                if request.content_length is None:
                    raise HttpError(411, "send the campaign (CSV, or JSON) with a Content-Length")
                try:
                    asked = read_request(request.body, header(request, "Content-Type") or "", query, time.time())
                except RequestError as exc:
                    raise HttpError(400, str(exc)[:500]) from None
                return respond_json(await self.campaigns.start(asked, key_name or ""), 202)
            if len(parts) == 3:
                return respond_json({"campaigns": await self.on_store(self.campaigns.listing)})
            if len(parts) in (4, 5) and parts[3].isdigit() and len(parts[3]) < 19:
                campaign_id = int(parts[3])
                if len(parts) == 5 and parts[4] == "stop":
                    return respond_json(await self.campaigns.stop(campaign_id), 202)
                if len(parts) == 4:
                    detail = await self.on_store(lambda store: self.campaigns.detail(store, campaign_id))
                    if detail is None:
                        raise HttpError(404, "no such campaign")
                    return respond_json(detail)
        except CampaignRefused as exc:
            if exc.status >= 500:
                log.warning("console: a campaign was refused: %s", exc.body["error"])
            self.counters["bad_requests" if exc.status < 500 else "errors"] += 1
            return respond_json(exc.body, exc.status)
        raise HttpError(404, "no such campaign path: /api/campaigns, /api/campaigns/ID, /api/campaigns/ID/stop")

    async def chat_message(self, request: Request) -> Response:
        """``POST /chat/messages``: one message of a text session (workers/chat/endpoint.py, ChatEndpoint.message)."""
        key_name = await self.who(request)
        if key_name is None:
            raise HttpError(401, "an API key is needed (Authorization: Bearer KEY), or a session from /login")
        assert isinstance(request, BodyRequest)
        if request.refusal is not None:
            raise HttpError(*request.refusal)
        if request.content_length is None:
            raise HttpError(411, "send the JSON body with a Content-Length")
        if not self.chat.available:
            raise HttpError(503, f"no agent to chat with: {self.chat.problem}")
        status, value, extra = await self.chat.message(key_name, request.body)
        if status != 200:
            raise HttpError(status, value["error"], extra)
        return respond_json(value)

    async def observe(self, connection: ServerConnection) -> None:
        assert connection.request is not None
        if urllib.parse.urlsplit(connection.request.path).path == "/chat":
            resume = query_text(urllib.parse.parse_qs(urllib.parse.urlsplit(connection.request.path).query), "session")
            await self.chat.serve(connection, await self.who(connection.request) or "", resume)
            return
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(connection.request.path).query)
        call_sid = (query.get("call") or [""])[0]
        since = int(float((query.get("since") or ["0"])[0] or 0))
        observer = Observer(call_sid)
        self.fanout.add(observer)  # first: live events buffer while the store is read
        self.counters["observers_opened"] += 1
        watcher = asyncio.create_task(self.watch_close(connection, observer))
        try:
            last = since
            if call_sid:
                try:
                    stored = await self.query("events", call_sid, since)
                except HttpError as exc:  # the store is down: the observer may come back with since=
                    await connection.close(1011, exc.message[:120])
                    return
                for event in stored:
                    await connection.send(wire_stored(event).decode())
                    self.counters["events_sent"] += 1
                    last = event["seq"]
            while True:
                seq, data = await observer.queue.get()
                if observer.gone:
                    return
                if observer.too_slow:
                    await connection.close(1008, "observer too slow")
                    return
                if call_sid and seq <= last:
                    continue  # already sent from the store
                await connection.send(data.decode())
                self.counters["events_sent"] += 1
                last = seq if call_sid else last
        except ConnectionClosed:
            pass
        finally:
            watcher.cancel()
            self.fanout.remove(observer)

    @staticmethod
    async def watch_close(connection: ServerConnection, observer: Observer) -> None:
        """An observer sends nothing; reading is how its close frame is seen (else its handler, waiting for
        an event, would hold the connection open until the client gives up, and a stopping console with it)."""
        try:
            async for _ in connection:
                pass
        except ConnectionClosed:
            pass
        observer.leave()

    def observer_count(self) -> int:
        return self.fanout.count()

    async def feed(self) -> None:
        context = zmq.asyncio.Context.instance()
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 10_000)
        sub.setsockopt(zmq.MAXMSGSIZE, messages.MAX_MESSAGE_BYTES)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"ipc://{self.runtime_dir / OBSERVE_FEED}")
        try:
            while True:
                decoded = messages.decode(await sub.recv())
                if isinstance(decoded, messages.ObservedEvents):
                    self.fanout.publish(rows_from_json(decoded.events))
                else:
                    self.counters["feed_rejected"] += 1
        finally:
            sub.close(linger=0)

    async def report(self) -> None:
        next_stats = 0.0
        while True:
            self.heartbeat_seq += 1
            pid = os.getpid()
            interval_ms = timing.heartbeat_interval_ms(bool(self.live))
            self.bus.send(self.gateway, messages.Heartbeat(PROCESS, pid, self.heartbeat_seq, time.monotonic_ns(), interval_ms))
            now = time.monotonic()
            if now >= next_stats:
                next_stats = now + 1.0
                values = {name: float(n) for name, n in self.counters.items()}
                values.update(observers=float(self.observer_count()), live_calls=float(len(self.live)),
                              observers_too_slow=float(self.fanout.too_slow), events_received=float(self.fanout.received))
                if self.fleet is not None:
                    values.update({name: float(n) for name, n in self.fleet.counters.items()})
                self.bus.send(self.gateway, messages.Stats(PROCESS, pid, values))
            await asyncio.sleep(interval_ms / 1000)

    async def run(self, stop: asyncio.Event) -> None:
        host, _, port = self.config.console_listen.rpartition(":")
        tasks = [asyncio.create_task(self.feed()), asyncio.create_task(self.report()),
                 asyncio.create_task(self.chat.sweep_forever())]
        if self.fleet is not None:
            tasks.append(asyncio.create_task(self.fleet.run()))
        async with serve(self.observe, host, int(port), process_request=self.process_request, max_size=4096,
                         server_header="voicecore-console", compression=None, create_connection=body_reading()) as server:
            log.info("console on http://%s (observers at /observe); origins %s; session cookie %s", self.config.console_listen,
                     ", ".join(self.origins), self.cookie)
            if guard.listens_on_all_interfaces(self.config.console_listen) and not self.config.console_origins \
                    and not self.config.console_public_url:
                log.warning("console: it listens on every interface, but browsers are served only from %s: set "
                            "console_origins (VOICECORE_CONSOLE_ORIGINS) to the address they use", ", ".join(self.origins))
            try:
                self.campaigns.resume_own()
            except Exception:  # noqa: BLE001 (a store that cannot be read now: the campaigns wait for a restart)
                log.exception("console: its running campaigns could not be resumed")
            await stop.wait()
            await self.campaigns.close()  # the calls in the air stay 'dialing': the next start follows them
            server.close(close_connections=True)  # 1001 to observers
            await server.wait_closed()
        for task in tasks:
            task.cancel()
        await self.chat.close()
        self.store_thread.shutdown(wait=False, cancel_futures=True)
        self.media_thread.shutdown(wait=False, cancel_futures=True)
        if self.store is not None:
            self.store.close()
        self.bus.close()


async def amain(config: Config) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if not config.console_listen or not database_url_for(config):
        log.error("the console needs console_listen and a call store (record_dir or database_url); it stops")
        raise SystemExit(2)
    await Console(config).run(stop)


def main() -> None:
    config = load_config(os.environ)
    setup_logging(PROCESS, config.log_level, config.log_format)
    logging.getLogger("websockets").setLevel(logging.WARNING)  # a line per connection is not news
    run_loop(amain(config))


if __name__ == "__main__":
    main()
