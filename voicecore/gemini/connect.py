"""How the node reaches Gemini Live: the endpoint (URL, API key header, outbound proxy) and what a close
from the vendor means for the node.

Owns the key's lookup (``GEMINI_API_KEY``, then ``GOOGLE_API_KEY``, as Google's SDK reads them, then the
configuration's ``realtime_api_key``), the URL (``realtime_url`` when set, so the simulator can stand in,
else the Gemini API's endpoint) and the close classification: 1008 (a key refused, a model not served, a
``setup`` the server refuses) is the configuration refused, fatal for every call; any other close is a drop
the call reconnects after, resuming its session. The key goes in the ``x-goog-api-key`` header, not in the
URL, so no log line that names the URL carries it.
"""

from __future__ import annotations

from collections.abc import Mapping

from voicecore.gemini import protocol as gp
from voicecore.realtime.transport import Endpoint, proxy_for
from voicecore.realtime.vendor_errors import FATAL, VendorFault

API_KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
API_KEY_HEADER = "x-goog-api-key"
PROVIDER = "gemini"


def api_key(environ: Mapping[str, str], configured: str = "") -> str:
    """The Gemini API key: GEMINI_API_KEY, GOOGLE_API_KEY, else the configuration's realtime_api_key."""
    for name in API_KEY_VARIABLES:
        if environ.get(name):
            return environ[name]
    return configured


def live_base_url(realtime_url: str) -> str:
    """``realtime_url`` when set (a simulator, a proxy), else the Gemini API's Live endpoint."""
    return realtime_url or gp.DEFAULT_BASE_URL


def endpoint(realtime_url: str, configured_key: str, environ: Mapping[str, str]) -> Endpoint:
    url = live_base_url(realtime_url)
    key = api_key(environ, configured_key)
    headers = [(API_KEY_HEADER, key)] if key else []
    return Endpoint(url, headers, proxy_for(url, environ), PROVIDER)


def classify_close(code: int | None, reason: str) -> VendorFault | None:
    """A close from Gemini: 1008 refuses the configuration (fatal: every call would meet it); None for a
    drop the call reconnects after."""
    if code == gp.CLOSE_POLICY_VIOLATION:
        lowered = reason.lower()
        kind = "auth" if "api key" in lowered else "model" if "not found" in lowered else "session_config"
        return VendorFault(FATAL, kind, str(code), reason.strip() or "the vendor refused the session's setup")
    return None
