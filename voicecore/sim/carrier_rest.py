"""asyncio shell of the carrier simulator's REST APIs (Telnyx Call Control, Plivo Call API, Vonage Voice API):
the stack's hang-up and transfer requests for a simulated call end that call, as the carrier would.

Owns: the HTTP/1.1 server (h11, one request per connection, 127.0.0.1), the registry of live simulated calls
(place_call registers each call it places with ``rest=``), what a granted request does to the call (its
stream is stopped and closed by the carrier side: ``CallResult.closed_by`` is ``rest_hangup`` or
``rest_transfer``), and for a Plivo transfer the fetch of its ``aleg_url``, signed with X-Plivo-Signature-V3
as Plivo signs it, whose ``<Dial>`` is recorded. Every request and its outcome stays in ``requests``.

Must not know: what is checked and answered (voicecore/sim/carrier_rest_core.py), or how a call is played.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

import h11

from voicecore import http_client
from voicecore.carriers.plivo import protocol as plivo
from voicecore.sim import carrier_rest_core as core
from voicecore.sim.carrier_modes_core import CarrierCredentials

MAX_BODY_BYTES = 64 * 1024
READ_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class RestRequestSeen:
    """One request the simulated carrier got: as sent (method, path, Authorization, body) and its outcome.
    ``dialed``: for a Plivo transfer, what the XML at its ``aleg_url`` dialed ("" if it dialed nothing)."""

    method: str
    path: str
    authorization: str
    body: bytes
    outcome: core.RestOutcome
    dialed: str = ""


class CarrierRestServer:
    """``async with CarrierRestServer(credentials) as rest:`` then ``rest.base_url`` is the API base URL to give
    the stack (``credentials.rest_settings(rest.base_url)``) and ``rest.requests`` fills as the stack calls."""

    def __init__(self, credentials: CarrierCredentials, accept_unknown_calls: bool = False) -> None:
        # accept_unknown_calls: grant requests for calls not registered here (a bench whose calls live in other
        # processes: the carrier says yes, the call runs on to its script's end as the load expects)
        self.accept_unknown_calls = accept_unknown_calls
        self.credentials = credentials
        self.requests: list[RestRequestSeen] = []
        self._calls: dict[tuple[str, str], Callable[[str], None]] = {}
        self._server: asyncio.base_events.Server | None = None
        self.base_url = ""

    async def __aenter__(self) -> CarrierRestServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # --- the calls ---------------------------------------------------------------------------------------
    def register(self, carrier: str, call_id: str, end: Callable[[str], None]) -> None:
        """A live call: ``end(action)`` ends it (hangup or transfer) when a granted request names it."""
        self._calls[(carrier, call_id)] = end

    def unregister(self, carrier: str, call_id: str) -> None:
        self._calls.pop((carrier, call_id), None)

    def _is_live(self, carrier: str, call_id: str) -> bool:
        return self.accept_unknown_calls or (carrier, call_id) in self._calls

    # --- HTTP -------------------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            request, body = await asyncio.wait_for(self._read(reader, connection), READ_TIMEOUT_S)
            headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in request.headers}
            method = request.method.decode("ascii")
            path = urllib.parse.urlsplit(request.target.decode("latin-1")).path
            outcome = core.handle(method, path, headers, body, self.credentials, self._is_live, now_s=time.time(),
                                  api_id=secrets.token_hex(8))
            response_headers = [("Content-Type", outcome.content_type), ("Content-Length", str(len(outcome.body))),
                                ("Connection", "close")]
            writer.write(connection.send(h11.Response(status_code=outcome.status, headers=response_headers)))
            if outcome.body:
                writer.write(connection.send(h11.Data(data=outcome.body)))
            writer.write(connection.send(h11.EndOfMessage()))
            await writer.drain()
        except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError):
            writer.close()
            return
        finally:
            if not writer.is_closing():
                writer.close()
        dialed = ""
        if outcome.action == core.TRANSFER and outcome.carrier == "plivo":
            dialed = await self._fetch_aleg_url(outcome.target, outcome.call_id)
        self.requests.append(RestRequestSeen(method, path, headers.get("authorization", ""), body, outcome, dialed))
        end = self._calls.pop((outcome.carrier, outcome.call_id), None) if outcome.action else None
        if end is not None:
            end(outcome.action)

    async def _read(self, reader: asyncio.StreamReader, connection: h11.Connection) -> tuple[h11.Request, bytes]:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                connection.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY_BYTES:
                    raise ValueError("body too large")
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                return request, bytes(body)
            elif isinstance(event, h11.ConnectionClosed):
                raise ValueError("connection closed mid-request")

    async def _fetch_aleg_url(self, url: str, call_uuid: str) -> str:
        """Plivo runs a transfer by fetching its aleg_url (a signed form POST) and following the XML."""
        form = core.plivo_transfer_form(call_uuid)
        nonce = secrets.token_hex(10)
        signature = plivo.compute_signature_v3(self.credentials.plivo_auth_token, url, nonce, form, "POST")
        headers = (("Content-Type", "application/x-www-form-urlencoded"), (plivo.SIGNATURE_V3_HEADER, signature),
                   (plivo.SIGNATURE_V3_NONCE_HEADER, nonce))
        try:
            status, body = await http_client.send("POST", url, headers, urllib.parse.urlencode(form).encode("ascii"),
                                                  user_agent="PlivoHTTP/1.1")
        except (OSError, asyncio.TimeoutError, h11.ProtocolError, ValueError):
            return ""
        return (core.dial_target(body) or "") if status == 200 else ""
