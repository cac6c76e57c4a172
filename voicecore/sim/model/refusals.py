"""How the simulated vendor refuses a connection it will not serve, sans-I/O: the API forms it accepts
(OpenAI's and Azure OpenAI's), the key and the model it checks, the retired beta shape, and the vendor's
own words for each refusal.

Owns the handshake's decision (`check_handshake`) from the request's path, query and headers, and the
refusal's wire form: on OpenAI's path (``/v1/realtime?model=``, ``Authorization: Bearer``) the socket opens,
an ``error`` event says why and a close frame follows; on Azure's (``/openai/v1/realtime?model=DEPLOYMENT``
or ``/openai/realtime?...&deployment=DEPLOYMENT``, the key in ``api-key``) the upgrade is answered with the
HTTP status and Azure's JSON error body. The shell (voicecore.sim.model_server) sends what this returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from urllib.parse import parse_qs, urlsplit

import orjson

from voicecore.sim.model.config import SimConfig

OPENAI = "openai"
AZURE = "azure"
CLOSE_POLICY = 1008  # policy violation: the session is refused
CLOSE_RETIRED = 4000  # the vendor's close code for a retired API shape
RETIRED_BETA = "beta_api_shape_disabled"


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """A connection the vendor will not serve: ``http_status`` and ``body`` refuse the upgrade (Azure), else
    the socket opens, ``error`` goes out as an ``error`` event, and it is closed with ``close_code``."""

    code: str  # the vendor's error code (what a harness counts)
    http_status: int = 0
    body: bytes = b""
    error: dict | None = None
    close_code: int = CLOSE_POLICY
    close_reason: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Handshake:
    """What the request asked for: the API form, the model (Azure: the deployment), the key, beta or not."""

    form: str
    model: str | None
    key: str | None
    beta: bool


def read_handshake(path: str, headers: Mapping[str, str]) -> Handshake:
    parts = urlsplit(path)
    query = parse_qs(parts.query)
    form = AZURE if parts.path.startswith("/openai/") else OPENAI
    model = (query.get("model") or query.get("deployment") or [None])[0]
    authorization = headers.get("Authorization") or ""
    bearer = authorization[7:].strip() if authorization[:7].lower() == "bearer " else None
    key = headers.get("api-key") if form == AZURE and headers.get("api-key") else bearer
    beta = (headers.get("OpenAI-Beta") or "").strip().lower() == "realtime=v1"
    return Handshake(form, model, key, beta)


def _masked(key: str | None) -> str:
    if not key:
        return ""
    return key[:3] + "*" * max(0, min(len(key) - 7, 20)) + key[-4:] if len(key) > 8 else "*" * len(key)


def _error(code: str, message: str, error_type: str = "invalid_request_error") -> dict:
    return {"type": error_type, "code": code, "message": message, "param": None, "event_id": None}


def check_handshake(config: SimConfig, handshake: Handshake, legacy_beta: bool) -> Refusal | None:
    """The refusal this handshake gets, or None (served). ``legacy_beta``: this server still speaks the beta
    shape (a simulator configured with naming "beta", for records made before the vendor retired it)."""
    if handshake.form == AZURE:
        if config.api_keys and handshake.key not in config.api_keys:
            body = {"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API "
                                                        "endpoint. Make sure to provide a valid key for an active "
                                                        "subscription and use a correct regional API endpoint for "
                                                        "your resource."}}
            return Refusal("401", http_status=401, body=orjson.dumps(body))
        if not handshake.model or (config.models and handshake.model not in config.models):
            body = {"error": {"code": "DeploymentNotFound",
                              "message": "The API deployment for this resource does not exist. If you created the "
                                         "deployment within the last 5 minutes, please wait a moment and try again."}}
            return Refusal("DeploymentNotFound", http_status=404, body=orjson.dumps(body))
        return None
    if handshake.beta and not legacy_beta:
        return Refusal(RETIRED_BETA, error=_error(RETIRED_BETA, "The beta Realtime API shape has been disabled. Use the "
                                                  "GA Realtime API (remove the OpenAI-Beta: realtime=v1 header)."),
                       close_code=CLOSE_RETIRED, close_reason=RETIRED_BETA)
    if config.api_keys and handshake.key not in config.api_keys:
        message = (f"Incorrect API key provided: {_masked(handshake.key)}. You can find your API key at "
                   "https://platform.openai.com/account/api-keys." if handshake.key else
                   "You didn't provide an API key. You need to provide your API key in an Authorization header "
                   "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
        return Refusal("invalid_api_key", error=_error("invalid_api_key", message), close_reason="invalid_api_key")
    if config.models and handshake.model not in config.models:
        message = f"The model '{handshake.model}' does not exist or you do not have access to it."
        return Refusal("model_not_found", error=_error("model_not_found", message), close_reason="model_not_found")
    return None


def expired_error(limit_ms: int) -> dict:
    """The `error` object of a session that reached the vendor's longest duration."""
    span = f"{limit_ms // 60_000} minutes" if limit_ms % 60_000 == 0 else f"{limit_ms / 1000:g} seconds"
    return _error("session_expired", f"Your session hit the maximum duration of {span}.")
