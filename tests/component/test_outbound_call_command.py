"""`voicecore call`: one call placed through the carrier simulator's Calls API (real HTTP on loopback), and the
command's refusals before anything is sent."""

from __future__ import annotations

import asyncio
import dataclasses
import urllib.parse
from pathlib import Path

from voicecore import cli
from voicecore.config import load_config
from voicecore.outbound.call_command import place
from voicecore.sim.carrier import generate_credentials
from voicecore.sim.carrier_rest import CarrierRestServer

ACCOUNT = "AC" + "0123456789abcdef" * 2
CALLEE = "+46701234567"


def test_a_call_is_placed_with_its_fields_and_the_carrier_reports_its_progress_to_the_node():
    async def run():
        credentials = generate_credentials("tok")
        async with CarrierRestServer(credentials) as rest:
            rest.callees[CALLEE] = "busy"
            rest.ring_ms = 40
            config = dataclasses.replace(load_config({}, None), twilio_api_base=rest.base_url,
                                         twilio_account_sid=ACCOUNT, twilio_auth_token="tok",
                                         public_url="http://127.0.0.1:9")  # nobody listens: callbacks fail
            outcome = await place(config, CALLEE, "+46701234568", {"first_name": "Anna"})
            await asyncio.sleep(0.05)
            await rest.wait_outbound(5.0)
            return outcome, rest.outbound, rest.requests

    outcome, placed, requests = asyncio.run(run())
    assert outcome["ok"] and outcome["status"] == "queued"
    assert [seen.placed.call_sid for seen in placed] == [outcome["call_sid"]]
    call = placed[0].placed
    assert call.to == CALLEE and call.status_callback == "http://127.0.0.1:9/twilio/call-status"
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(call.url).query))
    assert query == {"direction": "outbound", "callee": CALLEE, "field.first_name": "Anna"}
    assert requests[0].outcome.status == 201
    # busy: progress callbacks only, each tried against the node (which is down here) and its failure kept
    assert [status for status, _result in placed[0].statuses] == ["initiated", "ringing", "busy"]
    assert all(isinstance(result, str) for _status, result in placed[0].statuses)


def test_the_command_refuses_a_call_it_cannot_place_before_sending_anything(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("VOICECORE_TWILIO_ACCOUNT_SID", raising=False)
    monkeypatch.setenv("VOICECORE_TWILIO_API_BASE", "http://127.0.0.1:9")
    assert cli.main(["call", CALLEE, "--from", "+46701234568"]) == 2
    assert "twilio_account_sid is not set" in capsys.readouterr().err
    assert cli.main(["call", "12", "--from", "+46701234568"]) == 2
    assert "voicecore call:" in capsys.readouterr().err
    assert cli.main(["call", CALLEE, "--from", "+46701234568", "--field", "novalue"]) == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "agent.toml").write_text('name = "a"\ninstructions = "Call {first_name} about {reason}."\n')
    assert cli.main(["call", CALLEE, "--from", "+46701234568", "--agent", str(agent), "--field", "reason=x"]) == 2
    assert "--field first_name=..." in capsys.readouterr().err


def test_the_console_places_a_call_for_an_api_key_and_refuses_what_it_cannot_place(tmp_path):
    import http.client
    import json

    from console_alone import start_console

    async def serve(ready, stop, seen):
        async with CarrierRestServer(generate_credentials("tok")) as rest:
            rest.callees[CALLEE] = "failed"
            rest.ring_ms = 40
            ready.append(rest.base_url)
            while not stop:
                await asyncio.sleep(0.02)
            await rest.wait_outbound(5.0)
            seen.extend(rest.outbound)

    import threading

    ready: list[str] = []
    stop: list[bool] = []
    seen: list = []
    thread = threading.Thread(target=lambda: asyncio.run(serve(ready, stop, seen)))
    thread.start()
    try:
        while not ready:
            threading.Event().wait(0.02)
        console = start_console(tmp_path, VOICECORE_TWILIO_API_BASE=ready[0], VOICECORE_TWILIO_ACCOUNT_SID=ACCOUNT,
                                VOICECORE_TWILIO_AUTH_TOKEN="tok", VOICECORE_PUBLIC_URL="http://127.0.0.1:9")
        try:
            def post(body: object, key: str | None = console.key) -> tuple[int, dict]:
                connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=20)
                headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
                connection.request("POST", "/api/calls", body=json.dumps(body).encode(), headers=headers)
                response = connection.getresponse()
                answer = json.loads(response.read() or b"{}")
                connection.close()
                return response.status, answer

            status, answer = post({"to": CALLEE, "from": "+46701234568", "fields": {"first_name": "Anna"}})
            assert status == 201 and answer["call_sid"].startswith("CA") and answer["status"] == "queued"
            assert post({"to": CALLEE, "from": "+46701234568"}, key=None)[0] == 401
            assert post({"to": "12", "from": "+46701234568"})[0] == 400
            assert post({"to": CALLEE})[0] == 400
            assert post({"to": CALLEE, "from": "+46701234568", "fields": {"1bad": "x"}})[0] == 400
            assert post({"to": CALLEE, "from": "+46701234568", "carrier": "bandwidth"})[0] == 400
            # a carrier this node has no credentials for: nothing is sent
            status, answer_plivo = post({"to": CALLEE, "from": "+46701234568", "carrier": "plivo"})
            assert status == 503 and "plivo_auth_id" in answer_plivo.get("error", json.dumps(answer_plivo))
        finally:
            console.stop()
    finally:
        stop.append(True)
        thread.join(10)
    assert [s.placed.call_sid for s in seen] == [answer["call_sid"]]
    assert dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(seen[0].placed.url).query))["field.first_name"] == "Anna"
    assert [status for status, _result in seen[0].statuses] == ["initiated", "failed"]


PLIVO_AUTH_ID = "MA" + "ABCDEFGHIJ01234567"


def test_a_plivo_call_is_placed_with_make_call_and_its_ring_and_hangup_come_to_the_node():
    async def run():
        credentials = dataclasses.replace(generate_credentials("tok"), plivo_auth_id=PLIVO_AUTH_ID)
        async with CarrierRestServer(credentials) as rest:
            rest.callees[CALLEE] = "busy"
            rest.ring_ms = 40
            config = dataclasses.replace(load_config({}, None), plivo_api_base=rest.base_url,
                                         plivo_auth_id=PLIVO_AUTH_ID, plivo_auth_token=credentials.plivo_auth_token,
                                         public_url="http://127.0.0.1:9")  # nobody listens: callbacks fail
            outcome = await place(config, CALLEE, "+46701234568", {"first_name": "Anna"}, carrier="plivo",
                                  machine_detection="Enable")
            await asyncio.sleep(0.05)
            await rest.wait_outbound(5.0)
            return outcome, rest.outbound, rest.requests

    outcome, placed, requests = asyncio.run(run())
    assert outcome["ok"] and outcome["carrier"] == "plivo" and outcome["status"] == "queued"
    assert requests[0].path == f"/v1/Account/{PLIVO_AUTH_ID}/Call/" and requests[0].outcome.status == 201
    call = placed[0].placed
    assert (call.carrier, call.call_sid) == ("plivo", outcome["call_sid"])
    assert call.status_callback == call.ring_url == "http://127.0.0.1:9/plivo/call-status"
    # Plivo's machine detection asked for (its own value: true, never hangup), its result to the same callback URL
    assert (call.machine_detection, call.async_amd, call.amd_callback) == ("true", True, call.status_callback)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(call.url).query))
    assert urllib.parse.urlsplit(call.url).path == "/plivo/voice"
    assert query == {"direction": "outbound", "callee": CALLEE, "field.first_name": "Anna"}
    # busy: Plivo's ring, then its hang-up with CallStatus busy, each tried against the (down) node
    assert [status for status, _result in placed[0].statuses] == ["ringing", "busy"]


def test_the_command_refuses_a_plivo_call_without_plivos_credentials(capsys, monkeypatch):
    monkeypatch.delenv("VOICECORE_PLIVO_AUTH_ID", raising=False)
    assert cli.main(["call", CALLEE, "--from", "+46701234568", "--carrier", "plivo"]) == 2
    assert "plivo_auth_id is not set" in capsys.readouterr().err
    monkeypatch.delenv("VOICECORE_TELNYX_TEXML_APPLICATION_ID", raising=False)
    assert cli.main(["call", CALLEE, "--from", "+46701234568", "--carrier", "telnyx"]) == 2
    assert "telnyx_texml_application_id is not set" in capsys.readouterr().err
