"""How the node reaches Gemini Live: the endpoint (URL, API key header, outbound proxy) and what a close
from the vendor means for the node.

Owns the key's lookup (``GEMINI_API_KEY``, then ``GOOGLE_API_KEY``, as Google's SDK reads them, then the
configuration's ``realtime_api_key``), the URL (``realtime_url`` when set, so the simulator can stand in,
else the Gemini API's endpoint) and the close classification: 1008 (a key refused, a model not served, a
``setup`` the server refuses) is the configuration refused, fatal for every call; any other close is a drop
the call reconnects after, resuming its session. The key goes in the ``x-goog-api-key`` header, not in the
URL, so no log line that names the URL carries it. ``trial_session``: one connection that sends the agent's
``setup`` and waits for ``setupComplete`` or the refusal, as the OpenAI path's trial does with session.update.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from picows import WSCloseCode, WSError, WSFrame, WSInvalidStatusError, WSListener, WSMsgType, WSTransport, ws_connect

from voicecore.gemini import protocol as gp
from voicecore.realtime.transport import TRIAL_TIMEOUT_S, Endpoint, TrialResult, proxy_for
from voicecore.realtime.vendor_errors import FATAL, TRANSIENT, VendorFault, classify_handshake

API_KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
API_KEY_HEADER = "x-goog-api-key"
PROVIDER = "gemini"
_ws_log = logging.getLogger("voicecore.gemini.trial")
_ws_log.setLevel(logging.WARNING)


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


def classify_close(code: int | None, reason: str) -> VendorFault | None:
    """A close from Gemini: 1008 refuses the configuration (fatal: every call would meet it); None for a
    drop the call reconnects after."""
    if code == gp.CLOSE_POLICY_VIOLATION:
        lowered = reason.lower()
        kind = "auth" if "api key" in lowered else "model" if "not found" in lowered else "session_config"
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
