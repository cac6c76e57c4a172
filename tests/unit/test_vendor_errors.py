"""Which vendor refusals are the node's configuration (fatal) and which pass (transient): handshake statuses
with the vendor's JSON body, error events, failed responses and close frames, as OpenAI and Azure send them."""

from __future__ import annotations

import orjson
import pytest

from voicecore.realtime.vendor_errors import (
    FATAL,
    TRANSIENT,
    classify_close,
    classify_error,
    classify_handshake,
    scan_server_text,
)


def error_event(error_type: str, code: str | None, message: str, param: str | None = None) -> str:
    return orjson.dumps({"type": "error", "event_id": "event_1",
                         "error": {"type": error_type, "code": code, "message": message, "param": param,
                                   "event_id": None}}).decode()


@pytest.mark.parametrize("error_type,code,kind", [
    ("invalid_request_error", "invalid_api_key", "auth"),
    ("authentication_error", None, "auth"),
    ("invalid_request_error", "model_not_found", "model"),
    ("insufficient_quota", "insufficient_quota", "quota"),
    ("invalid_request_error", "beta_api_shape_disabled", "retired"),
])
def test_a_refused_key_model_quota_or_shape_is_fatal_wherever_it_comes(error_type, code, kind):
    fault = scan_server_text(error_event(error_type, code, "the vendor's words"), configuring=False)
    assert fault is not None and fault.fatal and fault.kind == kind and fault.message == "the vendor's words"
    assert "the vendor's words" in fault.describe()


def test_a_rejected_session_update_is_fatal_but_a_mid_call_client_error_is_the_calls_business():
    rejected = error_event("invalid_request_error", "unknown_parameter", "Unknown parameter: 'session.foo'.",
                           "session.foo")
    assert scan_server_text(rejected, configuring=False).kind == "session_config"
    before_ack = error_event("invalid_request_error", "invalid_value", "Invalid value: 'nova2'.", "voice")
    assert scan_server_text(before_ack, configuring=True).kind == "session_config"
    assert scan_server_text(before_ack, configuring=False) is None
    busy = error_event("invalid_request_error", "conversation_already_has_active_response", "busy")
    assert scan_server_text(busy, configuring=False) is None


@pytest.mark.parametrize("code", ["rate_limit_exceeded", "server_error", "session_expired"])
def test_rate_limits_server_errors_and_an_expired_session_pass(code):
    fault = scan_server_text(error_event("server_error" if code == "server_error" else "invalid_request_error", code,
                                         "try again"), configuring=True)
    assert fault is not None and fault.severity == TRANSIENT


def test_a_failed_response_carries_its_error_in_status_details():
    done = orjson.dumps({"type": "response.done", "event_id": "e", "response": {
        "id": "resp_1", "status": "failed", "status_details": {"type": "failed", "error": {
            "type": "insufficient_quota", "code": "insufficient_quota",
            "message": "You exceeded your current quota, please check your plan and billing details."}}}}).decode()
    fault = scan_server_text(done, configuring=False)
    assert fault.severity == FATAL and fault.kind == "quota"
    limited = done.replace("insufficient_quota", "rate_limit_exceeded")
    assert scan_server_text(limited, configuring=False).severity == TRANSIENT


def test_ordinary_events_are_not_parsed_for_errors():
    assert scan_server_text('{"type":"response.output_audio.delta","delta":"AAAA"}', configuring=False) is None
    assert scan_server_text('{"type":"response.done","response":{"status":"completed","error":null}}',
                            configuring=False) is None
    assert scan_server_text('{"type":"error", "error": "not an object"', configuring=False) is None


def test_handshake_statuses():
    azure_401 = b'{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint."}}'
    fault = classify_handshake(401, azure_401)
    assert (fault.severity, fault.kind) == (FATAL, "auth") and "invalid subscription key" in fault.message
    assert classify_handshake(404, b'{"error":{"code":"DeploymentNotFound","message":"The API deployment for this '
                                   b'resource does not exist."}}').kind == "model"
    assert classify_handshake(403, None).fatal
    assert classify_handshake(503, b"Service Unavailable").severity == TRANSIENT
    quota = b'{"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"You exceeded your quota."}}'
    assert classify_handshake(429, quota).kind == "quota"
    assert classify_handshake(429, b'{"error":{"code":"rate_limit_exceeded","message":"slow down"}}').severity == TRANSIENT


def test_close_4000_is_the_retired_beta_shape_and_other_closes_are_drops():
    fault = classify_close(4000, "beta_api_shape_disabled")
    assert fault.fatal and fault.kind == "retired" and "retired the beta Realtime interface" in fault.message
    assert classify_close(4000, "").fatal
    assert classify_close(1011, "server error") is None
    assert classify_close(1000, "") is None
    assert classify_close(1008, "invalid_api_key").kind == "auth"


def test_a_client_error_that_is_neither_passes_through():
    assert classify_error("invalid_request_error", "item_not_found", "no such item", "item_id") is None
