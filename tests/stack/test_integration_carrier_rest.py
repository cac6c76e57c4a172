"""Hang-up and transfer of Telnyx, Plivo, Vonage and Exotel calls, end to end: a real stack (turns mode), the
model simulator, and the carrier simulator placing each carrier's call and serving its REST API
(voicecore/sim/carrier_rest.py) with the credentials the stack was given.

The caller presses '#' (the agent says goodbye and hangs up) or '0' (the agent transfers to its transfer_to).
Telnyx, Plivo and Vonage get the request their API documents, authenticated as it requires, and end the
simulated call; Exotel's stream is closed by the gateway (its flow's next applet takes the call)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from stacks import start_stack
from waiting import wait_until

from voicecore.sim.carrier import CallScript, generate_credentials, place_call
from voicecore.sim.carrier_rest import CarrierRestServer

pytestmark = pytest.mark.integration

TRANSFER_TO = "+15550100"
KEY_AT_MS = 6000
DEFAULT_AGENT = Path(__file__).resolve().parents[2] / "voicecore" / "agents" / "default" / "agent.toml"
REST_CARRIERS = ["telnyx", "plivo", "vonage"]
EXOTEL_KEYS = ["#", "0"]
CASES = [(carrier, key) for key in ("#", "0") for carrier in REST_CARRIERS] + [("exotel", key) for key in EXOTEL_KEYS]


@pytest.fixture(scope="module")
def stack_and_rest(tmp_path_factory):
    agent = tmp_path_factory.mktemp("agent")
    # a top-level key before the file's tables (appended after them it would belong to the last one)
    (agent / "agent.toml").write_text(f'transfer_to = "{TRANSFER_TO}"\n' + DEFAULT_AGENT.read_text())
    keys = generate_credentials()
    rest = CarrierRestServer(keys)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(rest.__aenter__())
    running = start_stack(call_control="turns", agent=str(agent), **keys.stack_settings(),
                          **keys.rest_settings(rest.base_url))
    try:
        yield running, rest, keys, loop
    finally:
        running.stop()
        loop.run_until_complete(rest.__aexit__())
        loop.close()


def _script(key: str) -> CallScript:
    return CallScript(duration_ms=20_000, dtmf=((KEY_AT_MS, key),))


def _naming(requests, call_sid: str) -> list:
    """The requests whose path names the call (a refused one too: its outcome names no call)."""
    return [request for request in requests if call_sid in request.path.split("/")]


def _log(running) -> str:
    # the calls overlap: by the time a test looks, its call's lines can be far from the log's end
    return running.log_tail(1 << 30)


@pytest.fixture(scope="module")
def calls(stack_and_rest):
    """Every case's call, placed at once: a call waits on the clock (the key at 6 s, the agent's goodbye), not
    on the CPU, so side by side they take the time of one. The eight fill the stack's max_calls, no more."""
    running, rest, keys, loop = stack_and_rest

    async def place_all():
        async with running.model_sim():
            return await asyncio.gather(*(
                place_call(running.config.base_url, keys.twilio_auth_token, _script(key), carrier=carrier,
                           credentials=keys, rest=rest) for carrier, key in CASES), return_exceptions=True)

    before = len(rest.requests)
    results = dict(zip(CASES, loop.run_until_complete(place_all())))
    return results, rest.requests[before:]


def _placed(stack_and_rest, calls, carrier: str, key: str):
    """The case's call and the REST requests that name it. Every request the calls made must name one of them:
    one that names none would otherwise go unseen by every test."""
    running, rest, keys, _loop = stack_and_rest
    results, requests = calls
    result = results[(carrier, key)]
    if isinstance(result, BaseException):
        raise result
    sids = [other.call_sid for other in results.values() if not isinstance(other, BaseException)]
    assert [request for request in requests if not any(_naming([request], sid) for sid in sids)] == [], requests
    return running, rest, keys, result, _naming(requests, result.call_sid)


def _call(stack_and_rest, carrier: str, key: str):
    """One call with nothing beside it: a case that changes what the simulated carrier accepts changes it for
    every call then live."""
    running, rest, keys, loop = stack_and_rest

    async def call():
        async with running.model_sim():
            return await place_call(running.config.base_url, keys.twilio_auth_token, _script(key), carrier=carrier,
                                    credentials=keys, rest=rest)

    before = len(rest.requests)
    result = loop.run_until_complete(call())
    return running, rest, keys, result, rest.requests[before:]


@pytest.mark.parametrize("carrier", REST_CARRIERS)
def test_the_agent_hangs_up_a_call_through_its_carriers_rest_api(stack_and_rest, calls, carrier):
    running, rest, keys, result, seen = _placed(stack_and_rest, calls, carrier, "#")
    assert result.closed_by == "rest_hangup", (result.closed_by, result.errors, running.log_tail())
    (request,) = seen
    assert request.outcome.status in (200, 204) and request.outcome.call_id == result.call_sid
    if carrier == "telnyx":
        assert request.method == "POST" and request.path == f"/v2/calls/{result.call_sid}/actions/hangup"
        assert request.authorization == f"Bearer {keys.telnyx_api_key}"
    elif carrier == "plivo":
        assert request.method == "DELETE"
        assert request.path == f"/v1/Account/{keys.plivo_auth_id}/Call/{result.call_sid}/"
        assert request.authorization.startswith("Basic ")
    else:
        assert request.method == "PUT" and request.path == f"/v1/calls/{result.call_sid}"
        assert json.loads(request.body) == {"action": "hangup"}
        assert request.authorization.startswith("Bearer ey")  # the application JWT
    wait_until(lambda: f"call {result.call_sid}: hangup sent to {carrier.capitalize()}" in _log(running), 5,
               "the model worker's log line", detail=running.log_tail)


@pytest.mark.parametrize("carrier", REST_CARRIERS)
def test_the_agent_transfers_a_call_through_its_carriers_rest_api(stack_and_rest, calls, carrier):
    running, rest, keys, result, seen = _placed(stack_and_rest, calls, carrier, "0")
    assert result.closed_by == "rest_transfer", (result.closed_by, result.errors, running.log_tail())
    (request,) = seen
    assert request.outcome.action == "transfer"
    if carrier == "telnyx":
        assert request.path.endswith("/actions/transfer") and json.loads(request.body)["to"] == TRANSFER_TO
    elif carrier == "plivo":
        body = json.loads(request.body)
        assert body["legs"] == "aleg" and "/plivo/transfer?" in body["aleg_url"]
        assert request.dialed == TRANSFER_TO  # the gateway answered Plivo's signed fetch with <Dial><Number>
    else:
        ncco = json.loads(request.body)["destination"]["ncco"]
        assert ncco == [{"action": "connect", "endpoint": [{"type": "phone", "number": TRANSFER_TO.lstrip("+")}]}]


@pytest.mark.parametrize("key", EXOTEL_KEYS)
def test_an_exotel_call_is_ended_by_closing_its_stream(stack_and_rest, calls, key):
    running, rest, _keys, result, seen = _placed(stack_and_rest, calls, "exotel", key)
    assert seen == []  # Exotel's Voicebot applet has no REST call for it
    assert (result.closed_by, result.close_code) == ("server", 1000), (result.closed_by, result.errors)
    assert result.core.metrics.media_sent < 20_000 // 20 - 100  # ended well before the script's end
    wait_until(lambda: f"call {result.call_sid}: stream closed for the agent" in _log(running), 5,
               "the gateway's log line", detail=running.log_tail)


def test_a_request_with_wrong_credentials_is_refused_and_the_gateway_closes_the_stream_instead(stack_and_rest):
    """The simulator checks what the carrier checks: the stack's key is not the simulator's, so Telnyx answers
    401, the model worker does not retry a 4xx, and the gateway closes the stream (the agent has finished
    with the call: left open it would be dead air)."""
    import dataclasses

    running, rest, keys, loop = stack_and_rest
    rest.credentials = dataclasses.replace(keys, telnyx_api_key="KEY" + "0" * 32)
    try:
        _, _, _, result, seen = _call(stack_and_rest, "telnyx", "#")
    finally:
        rest.credentials = keys
    (request,) = seen
    assert request.outcome.status == 401 and request.outcome.action == ""
    assert (result.closed_by, result.close_code) == ("server", 1000), (result.closed_by, result.errors)
    wait_until(lambda: f"call {result.call_sid}: hangup failed: Authentication failed" in _log(running), 5,
               "the model worker's log line", detail=running.log_tail)
    assert f"call {result.call_sid}: hangup not sent; the gateway closes the stream instead" in _log(running)
