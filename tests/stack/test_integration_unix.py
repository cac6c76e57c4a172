"""The gateway on a Unix socket (listen = unix:PATH), as behind a TLS proxy on the same host: real
supervisord and workers, the carrier simulator dialling the socket for the webhook and the stream."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from stacks import start_stack
from voicecore.callreport import summarize
from voicecore.demo import demo_script
from voicecore.sim import carrier
from voicecore.sim.carrier import place_call
from voicecore.supervise import get_from_gateway
from voicecore.carriers.twilio.signature import compute_signature
from voicecore.wsunix import UnixStreamSocket
from workers.gateway.main import remove_stale_socket

CALL_SECONDS = 14  # long enough for demo_script's barge-in
PUBLIC_URL = "https://voice.example.com"  # what Twilio dials: the proxy, which forwards to the socket


@pytest.mark.integration
def test_a_call_through_the_unix_socket_behind_a_tls_proxy():
    socket_dir = Path(tempfile.mkdtemp(prefix="vc-uds-"))  # short: a socket path has at most 107 bytes
    path = str(socket_dir / "gateway.sock")
    running = start_stack(listen=f"unix:{path}", public_url=PUBLIC_URL)
    config = running.config
    try:
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        status, body = get_from_gateway(config, "/healthz")
        assert status == 200 and json.loads(body)["max_calls"] == config.max_calls

        async def calls():
            url = PUBLIC_URL + "/twilio/voice"
            form = {"CallSid": "CA" + "1" * 32, "AccountSid": "AC" + "1" * 32, "From": "+15005550006",
                    "To": "+15005550001", "CallStatus": "ringing"}
            signed = [("X-Twilio-Signature", compute_signature(config.twilio_auth_token, url, form))]
            twiml = await carrier.http_request("POST", url, form, signed, unix_socket=path)
            unsigned = await carrier.http_request("POST", url, form, [("X-Twilio-Signature", "AAAA")], unix_socket=path)
            async with running.model_sim() as sim:
                result = await place_call(config.base_url, config.twilio_auth_token, demo_script(CALL_SECONDS), unix_socket=path)
            return twiml, unsigned, sim, result

        (status, twiml), (status_unsigned, _), sim, result = asyncio.run(calls())
        # The TwiML points Twilio at the public wss URL; the signature is checked over the public URL.
        assert status == 200 and b'url="wss://voice.example.com/twilio/stream"' in twiml
        assert status_unsigned == 403
        assert result.closed_by == "carrier" and not result.errors, (result.errors, running.log_tail())
        report = summarize([result], sim, seconds=CALL_SECONDS, cpu_seconds=0.0, wall_seconds=CALL_SECONDS)
        assert report["stale_frames"] == 0 and report["bargeins"] == 1
        assert report["frames_sent"] > 100  # the greeting and answers reached the carrier
        assert report["problems"] == []
    finally:
        running.stop()
        shutil.rmtree(socket_dir, ignore_errors=True)
    assert not os.path.exists(path), "the gateway removes its socket when it stops"


def test_a_stale_socket_is_removed_and_anything_else_is_left(tmp_path):
    live = tmp_path / "live.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(live))
        listener.listen(1)
        with pytest.raises(SystemExit, match="another process listens on"):
            remove_stale_socket(str(live))  # a running gateway's socket stays
        assert live.exists()

    stale = tmp_path / "gateway.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as old:
        old.bind(str(stale))  # a socket file nobody listens on: a gateway that did not shut down
    remove_stale_socket(str(stale))
    assert not stale.exists()
    remove_stale_socket(str(stale))  # nothing there: nothing to do

    other = tmp_path / "notes.txt"
    other.write_text("keep me")
    with pytest.raises(SystemExit, match="exists and is not a socket"):
        remove_stale_socket(str(other))
    assert other.read_text() == "keep me"


def test_tcp_options_are_no_ops_on_a_unix_socket():
    """picows sets and reads TCP_NODELAY / TCP_QUICKACK on every connection's socket."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    b.close()
    with UnixStreamSocket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=a.detach()) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)  # the others still reach the kernel
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) > 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as plain, pytest.raises(OSError):
        plain.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # what picows would hit without it
