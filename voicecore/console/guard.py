"""Which browser requests the console serves, and where its login page may send a browser next. Pure: a
request's method and headers in, a verdict out; no I/O.

Owns the console's origins (``console_origins``, by default the console's own public URL and listen
address) and the rules a request to the JSON API or the ``/observe`` WebSocket passes:

- An ``Origin`` header, when there is one, must be one of the console's origins. Cookies do not isolate by
  port: a page of another port of the same host (another app, another console) is same-site, so a
  ``SameSite=Strict`` session cookie rides along on its requests; its Origin is what gives it away.
- A WebSocket upgrade or a state-changing request (POST) with the session cookie and without an Origin is
  refused unless it carries an API key in a header. A browser sends Origin on both; a program sends its key
  (and no Origin). One with no credential at all is left to the key check (401).
- A read of call data with the session cookie and no Origin (a browser's same-origin GET carries none)
  is refused when the browser says it came from another origin (``Sec-Fetch-Site`` other than
  ``same-origin``, or ``none`` for an address typed in or opened from a bookmark).

``next`` (the login page's way back): a path on this console only. ``//host``, ``/\\host``, a backslash
anywhere, a scheme, control characters and their percent-encoded forms are refused.
"""

from __future__ import annotations

import dataclasses
import urllib.parse

DEFAULT_PORTS = {"http": 80, "https": 443}
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")  # the names a browser on the console's own host uses
ALL_INTERFACES = ("0.0.0.0", "::", "[::]")
READ_FETCH_SITES = ("same-origin", "none")  # Sec-Fetch-Site of a console page's own request, or of a typed address
MAX_NEXT_CHARS = 2048
DECODE_ROUNDS = 4  # percent-decoding passes a next path is checked through (double-encoded tricks)


def normalize_origin(text: str) -> str | None:
    """``scheme://host[:port]`` as a browser serializes an origin (lower case, the default port left out),
    or None when ``text`` is no http(s) origin (a path, a query, user info, ``null``)."""
    text = text.strip()
    if not text or not text.isascii() or any(c in text for c in "?#@\\") or any(ord(c) < 0x21 or ord(c) == 0x7F for c in text):
        return None
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if scheme not in DEFAULT_PORTS or not host or parts.path not in ("", "/"):
        return None
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}" if port is None or port == DEFAULT_PORTS[scheme] else f"{scheme}://{host}:{port}"


def parse_origins(text: str) -> tuple[str, ...]:
    """``console_origins``: comma-separated origins, normalized; ValueError naming the first that is not one."""
    origins: list[str] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        origin = normalize_origin(item)
        if origin is None:
            raise ValueError(f"expected origins like https://console.example.com or http://127.0.0.1:8090 "
                             f"(scheme, host, port; no path), got {item!r}")
        origins.append(origin)
    return tuple(dict.fromkeys(origins))


def listen_origins(console_listen: str) -> tuple[str, ...]:
    """The origins a browser reaches ``console_listen`` (host:port) at directly: every loopback name for a
    loopback or all-interfaces address, else the address itself."""
    host, _, port = console_listen.rpartition(":")
    host = host.lower()
    if host in LOOPBACK_HOSTS or host in ("::1",) or host in ALL_INTERFACES:
        return tuple(f"http://{name}:{port}" for name in LOOPBACK_HOSTS)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return (normalize_origin(f"http://{host}:{port}") or f"http://{host}:{port}",)


def console_origins(origins: str, console_listen: str, console_public_url: str) -> tuple[str, ...]:
    """The origins the console accepts: ``origins`` when set, else ``console_public_url``'s origin (if any)
    and the listen address's."""
    if origins.strip():
        return parse_origins(origins)
    public = normalize_origin(public_url_origin(console_public_url)) if console_public_url else None
    return tuple(dict.fromkeys([*([public] if public else []), *listen_origins(console_listen)]))


def public_url_origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}"


def listens_on_all_interfaces(console_listen: str) -> bool:
    return console_listen.rpartition(":")[0].lower() in ALL_INTERFACES


@dataclasses.dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the guard reads of a request."""
    method: str
    origin: str | None  # the Origin header as sent; None when there is none
    fetch_site: str  # Sec-Fetch-Site, lower case; "" when there is none
    has_key: bool  # an API key in a header (Authorization: Bearer, X-Voicecore-Key)
    has_cookie: bool  # the console's session cookie
    websocket: bool  # the /observe upgrade


def refusal(request: RequestFacts, allowed: tuple[str, ...], *, changes_state: bool) -> str | None:
    """Why a request to the JSON API or /observe is refused (the sentence of the 403), or None to serve it."""
    if request.origin is not None:
        origin = normalize_origin(request.origin)
        if origin is None or origin not in allowed:
            return "that origin is not one of the console's (console_origins)"
        return None
    if request.has_key or not request.has_cookie:
        return None  # a program (no page can put a key header on a request to another origin), or nobody: 401
    if request.websocket or changes_state or request.method not in ("GET", "HEAD"):
        what = "a WebSocket upgrade" if request.websocket else f"a {request.method}"
        return f"{what} without an Origin header (a browser sends one; a program sends its API key)"
    if request.fetch_site and request.fetch_site not in READ_FETCH_SITES:
        return f"a read from another origin (Sec-Fetch-Site: {request.fetch_site})"
    return None


def next_path(raw: str | None) -> str | None:
    """Where the login page may send the browser: ``raw`` when it is a path on this console ("/" for none,
    and for the login page itself), None when it is refused (another site, or an attempt to look like one)."""
    if raw is None or raw == "":
        return "/"
    if len(raw) > MAX_NEXT_CHARS or not raw.isascii() or any(ord(c) < 0x21 or ord(c) == 0x7F for c in raw):
        return None
    candidate = raw
    for _ in range(DECODE_ROUNDS):
        if (not candidate.startswith("/") or candidate.startswith(("//", "/\\")) or "\\" in candidate
                or any(ord(c) < 0x20 or ord(c) == 0x7F for c in candidate)):
            return None
        decoded = urllib.parse.unquote(candidate)
        if decoded == candidate:
            break
        candidate = decoded
    else:
        return None  # still encoded after several passes: nobody's honest link
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme or parts.netloc:
        return None
    if raw == "/login" or raw.startswith(("/login?", "/login/")):
        return "/"
    return raw
