"""How the node reaches its realtime vendor: the endpoint (URL, headers, outbound proxy) from the
configuration, and a trial session that says whether the vendor accepts that configuration.

Owns the proxy choice from the standard environment variables (``HTTPS_PROXY`` for wss://, ``HTTP_PROXY``
for ws://, ``ALL_PROXY`` for either, ``NO_PROXY`` exempting hosts; loopback is never proxied: the built-in
simulator is on this machine) and ``trial_session``: open one session with the URL, key and model, send the
agent's session.update, and wait for session.updated or the vendor's refusal. `voicecore up` runs it before
anything starts (the preflight); the model worker runs it while the vendor refuses the node's configuration,
to find out when it no longer does. The per-call sockets live in the model worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import urllib.request
from collections.abc import Mapping
from urllib.parse import urlsplit

from picows import WSCloseCode, WSError, WSFrame, WSInvalidStatusError, WSListener, WSMsgType, WSTransport, ws_connect

from voicecore.realtime import events as rt
from voicecore.realtime.vendor_errors import FATAL, TRANSIENT, VendorFault, classify_close, classify_handshake, scan_server_text

TRIAL_TIMEOUT_S = 10.0  # the handshake and the session.updated together
_ws_log = logging.getLogger("voicecore.realtime.trial")
_ws_log.setLevel(logging.WARNING)


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def proxy_for(url: str, environ: Mapping[str, str]) -> str | None:
    """The outbound proxy for a ws:// or wss:// URL from the standard variables (either case), or None:
    wss:// takes HTTPS_PROXY, ws:// HTTP_PROXY, either ALL_PROXY; NO_PROXY's hosts and loopback go direct."""
    proxies: dict[str, str] = {}
    for name, value in environ.items():
        lower = name.lower()
        if value and lower.endswith("_proxy"):
            # the lower-case spelling wins over the upper-case one, as curl and urllib have it
            if lower == name or lower[:-6] not in proxies:
                proxies[lower[:-6]] = value
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host or _is_loopback(host):
        return None
    scheme = "https" if parts.scheme in ("wss", "https") else "http"
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy:
        return None
    if "no" in proxies and urllib.request.proxy_bypass_environment(host, {"no": proxies["no"]}):
        return None
    return proxy if "://" in proxy else "http://" + proxy


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """One vendor endpoint as the node dials it."""

    url: str
    headers: list[tuple[str, str]]
    proxy: str | None
    provider: str

    def describe(self) -> str:
        via = f" via proxy {urlsplit(self.proxy).hostname}:{urlsplit(self.proxy).port or ''}" if self.proxy else ""
        return f"{self.provider} {self.url.split('?', 1)[0]}{via}"


def endpoint(model_url: str, model: str, api_key: str, provider: str, deployment: str, environ: Mapping[str, str],
             call_sid: str | None = None, naming: rt.Naming = "ga") -> Endpoint:
    target = rt.RealtimeUrl(model=model, naming=naming, base_url=model_url, provider=provider, deployment=deployment)
    url = target.url()
    return Endpoint(url, target.headers(api_key or "none", call_sid=call_sid), proxy_for(url, environ), provider)


@dataclasses.dataclass(frozen=True, slots=True)
class TrialResult:
    ok: bool
    fault: VendorFault | None  # why not (None when ok)
    elapsed_s: float
    session: dict | None = None  # the session object of session.updated (ok)


class _TrialSocket(WSListener):
    def __init__(self, session_update: str, done: asyncio.Future) -> None:
        self.session_update = session_update
        self.done = done
        self.configured = False

    def _finish(self, result: tuple[VendorFault | None, dict | None]) -> None:
        if not self.done.done():
            self.done.set_result(result)

    def on_ws_connected(self, transport: WSTransport) -> None:
        transport.send(WSMsgType.TEXT, self.session_update.encode())

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type is WSMsgType.TEXT:
            text = frame.get_payload_as_bytes().decode("utf-8", errors="replace")
            fault = scan_server_text(text, configuring=not self.configured)
            if fault is not None:
                self._finish((fault, None))
                return
            event = rt.parse_server_event(text)
            if isinstance(event, rt.SessionUpdated):
                self.configured = True
                self._finish((None, event.session))
        elif frame.msg_type is WSMsgType.CLOSE:
            code = frame.get_close_code()
            reason = frame.get_close_message() or b""
            fault = classify_close(code.value, reason.decode("utf-8", errors="replace"))
            self._finish((fault or VendorFault(TRANSIENT, "close", str(code.value),
                                               "the vendor closed the session before it was configured"), None))
            if not transport.is_close_frame_sent:
                transport.send_close(WSCloseCode.OK)
            transport.disconnect()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self._finish((VendorFault(TRANSIENT, "close", "disconnected",
                                  "the connection ended before the session was configured"), None))


async def trial_session(target: Endpoint, session_update: str, timeout_s: float = TRIAL_TIMEOUT_S) -> TrialResult:
    """Open one session at ``target``, send ``session_update`` and wait for session.updated (ok) or the
    vendor's refusal (a refused handshake, an error event, a close); closed with 1000 either way. Costs no
    tokens: no response is asked for."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    done: asyncio.Future = loop.create_future()
    transport: WSTransport | None = None
    try:
        async with asyncio.timeout(timeout_s):
            transport, _ = await ws_connect(lambda: _TrialSocket(session_update, done), target.url,
                                            extra_headers=target.headers, proxy=target.proxy,
                                            websocket_handshake_timeout=timeout_s, logger_name=_ws_log)
            fault, session = await done
    except WSInvalidStatusError as exc:
        status = exc.response.status if exc.response is not None else 0
        fault, session = classify_handshake(int(status), exc.raw_body), None
    except (OSError, WSError) as exc:
        fault, session = VendorFault(TRANSIENT, "connect", type(exc).__name__, str(exc) or type(exc).__name__), None
    except TimeoutError:
        fault, session = VendorFault(TRANSIENT, "timeout", "timeout",
                                     f"no session.updated within {timeout_s:g} s"), None
    finally:
        if transport is not None and not transport.is_disconnected:
            if not transport.is_close_frame_sent:
                transport.send_close(WSCloseCode.OK)
            transport.disconnect()
    return TrialResult(fault is None, fault, loop.time() - started, session)


__all__ = ["Endpoint", "FATAL", "TRANSIENT", "TrialResult", "endpoint", "proxy_for", "trial_session"]
