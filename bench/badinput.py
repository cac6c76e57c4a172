"""The gateway's bad-input campaign: a hypothesis-driven attacker, run as its own process while the bench's
good calls are measured (`voicecore bench --bad-input`), or alone against any gateway:

    python -m bench.badinput --base-url http://127.0.0.1:PORT --seconds 30 --json out.json

Owns: the kinds of bad input (below), their hypothesis strategies, the documented outcome of each input
(an oracle written from docs/reference/wire.md, voicecore/carriers/twilio/stream.py's close-code table and
workers/gateway/main.py, not by asking the gateway's own parsers), a raw HTTP/WebSocket client
that can send what no well-behaved client would (unmasked, reserved bits, lying lengths, slow bytes),
and a scheduler that keeps the attack bounded (inputs per second, connections at once, nice +10).
Must not know the bench's figures: the bench (bench/run.py) counts crashes and memory around the run.

Inputs are drawn up front by seeded hypothesis runs (``@given`` with ``settings(max_examples=...,
deadline=None, database=None)``, generate phase only: no I/O inside hypothesis), one pool per kind, then
replayed against the gateway at a bounded rate until the time is up. Every input gets one outcome string
("http 403", "ws 1008", "held", ...) and is compared with the oracle's.

Kinds and their documented outcomes:

=================  =========================================================================================
http_signature     voice/status POST with a missing, empty, random, wrong-URL, wrong-token or tampered
                   X-Twilio-Signature: 403; correctly signed: 200 (voice) / 204 (status)
http_form          correctly signed forms with fuzzed fields: 400 unless CallSid/AccountSid (and for status
                   StreamSid, StreamEvent, StreamName, Timestamp) are as Twilio sends them; over 200 fields:
                   400; over 64 KiB: 413
http_garbage       urlencoded garbage bodies: 400 when not a strict form, else 403 (unsigned); over
                   64 KiB: 413
http_method        other methods on the webhooks, /healthz, /metrics: 405; unknown paths: 404
http_headers       extra headers on a signed webhook: 200; a head over 16 KiB: 431; a malformed header
                   line: 400
http_request_line  garbage instead of a request line: 400
http_slow          a head, a body or an upgrade that is not complete within 5 s (sent slowly or stalled):
                   408
flood              cap + k connections from one address: cap held (no answer), k answered 503 at once
ws_handshake       an upgrade without a valid Sec-WebSocket-Key or Connection: upgrade: 400; one to
                   another path or with another method: 404
ws_first_message   any first message: over 64 KiB 1009; not UTF-8/JSON/object, event not a string 1007;
                   unknown event, media/dtmf/mark/stop before start 1008; a valid `connected` then media 1008
ws_start           a `start` with a forged, empty or missing token: 1008; with a malformed field
                   (stream.py's list) 1007; a second `connected` or media first: 1008
ws_token           a token issued for another CallSid: 1008; the same token again: 1008 (reused); a token
                   a live call redeemed, replayed on a second socket: 1008, the live call unharmed
ws_stream          after an accepted start: bad base64, payload not 160 bytes, wrong track 1007; wrong
                   streamSid, a second start, connected, unknown event, a stop of another call 1008;
                   binary 1003; over 64 KiB 1009; stop 1000 (also after valid media, dtmf and marks)
ws_frames          fragmented messages as if whole (over 64 KiB in all: 1009); continuation first, a new
                   message inside a fragmented one, unmasked, reserved bits, unknown opcode, control frame
                   over 125 bytes or fragmented, non-minimal length: 1002; binary: 1003; a frame over
                   64 KiB: 1009; the peer's close: echoed if a peer may send the code, 1002 if not,
                   1000 if empty, 1007 for a reason that is not UTF-8
ws_ping_flood      many pings then a forged start: every ping answered with its payload, then 1008
ws_never_start     upgrade (maybe `connected`, pings) then nothing: 1008 after 5 s
=================  =========================================================================================

A valid `start` takes a call slot for a moment (ws_token's live call, ws_stream): those kinds run one at a
time, at most one a second; at capacity the documented 1013 counts as documented too.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import dataclasses
import json
import os
import random
import re
import signal
import struct
import sys
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson

from voicecore.timing import FRAME_BYTES, MAX_MESSAGE_BYTES, START_DEADLINE_MS
from voicecore.carriers.twilio.signature import compute_signature

TOKEN_ENV = "BENCH_TWILIO_AUTH_TOKEN"
MAX_FORM_FIELDS = 200  # a voice webhook has a few dozen fields; the gateway refuses more (400 "bad form")
MAX_BODY_BYTES = 64 * 1024
MAX_HEAD_BYTES = 16 * 1024
HEAD_TIMEOUT_S = 5.0
START_DEADLINE_S = START_DEADLINE_MS / 1000
STREAM_EVENTS = ("stream-started", "stream-stopped", "stream-error")
KNOWN_EVENTS = ("connected", "start", "media", "dtmf", "mark", "stop")
EXAMPLES_PER_KIND = 5  # unexpected outcomes kept per kind, as short examples
SLOW_AT_ONCE = 4  # http_slow and ws_never_start inputs in flight at once (each holds a connection 5 s)
FLOOD_EVERY_S = 2.0
PENDING_MARGIN = 8  # pending connections left to the good calls and the bench's /metrics

# Source addresses (all of 127.0.0.0/8 is loopback on Linux): good calls come from 127.0.0.1, each flood
# from its own 127.0.1.x, every other input from 127.0.2.x-127.0.9.x in turn, so no input meets the
# per-address cap by accident, and the flood's cap is exactly the one it tests.
FLOOD_ADDRESSES = [f"127.0.1.{i}" for i in range(1, 255)]
PROBE_ADDRESSES = [f"127.0.{a}.{b}" for a in range(2, 10) for b in range(1, 255)]


# ----- raw wire ------------------------------------------------------------------------------------


def ws_frame(opcode: int, payload: bytes, fin: bool = True, mask: bool = True, rsv: int = 0,
             length_form: int = 0) -> bytes:
    """One WebSocket frame as a client sends it; ``length_form`` 127 forces the 64-bit length (non-minimal)."""
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload)
    mask_bit = 0x80 if mask else 0
    if length_form == 127 or n >= 65536:
        head = bytes([b0, mask_bit | 127]) + struct.pack("!Q", n)
    elif n >= 126:
        head = bytes([b0, mask_bit | 126]) + struct.pack("!H", n)
    else:
        head = bytes([b0, mask_bit | n])
    if not mask:
        return head + payload
    key = os.urandom(4)
    # XOR with the key repeated: one big-int operation rather than a Python loop per byte
    repeated = (key * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big") if n else b""
    return head + key + masked


class Conn:
    """One TCP connection from a chosen source address, with a parser for what the gateway answers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buffer = b""
        self.pongs: list[bytes] = []

    @classmethod
    async def open(cls, host: str, port: int, source: str, timeout: float = 3.0) -> Conn:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, local_addr=(source, 0), limit=1 << 20), timeout)
        return cls(reader, writer)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def close(self) -> None:
        self.writer.transport.abort()

    async def _more(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        data = await asyncio.wait_for(self.reader.read(65536), left)
        if not data:
            return False
        self.buffer += data
        return True

    async def http_status(self, timeout: float) -> str:
        """The status of the gateway's answer: "http 403", or "eof" / "timeout" / "reset"."""
        deadline = time.monotonic() + timeout
        try:
            while b"\r\n" not in self.buffer:
                if not await self._more(deadline):
                    return "eof"
        except (TimeoutError, asyncio.TimeoutError):
            return "timeout"
        except (ConnectionError, OSError):
            return "reset"
        parts = self.buffer.split(b"\r\n", 1)[0].split(b" ")
        return f"http {parts[1].decode('latin-1')}" if len(parts) > 1 and parts[0].startswith(b"HTTP/") else "garbled"

    async def upgrade(self, path: str = "/twilio/stream", extra: bytes = b"") -> str:
        key = base64.b64encode(os.urandom(16))
        self.send(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n" + extra + b"\r\n")
        deadline = time.monotonic() + 3.0
        try:
            while b"\r\n\r\n" not in self.buffer:
                if not await self._more(deadline):
                    return "eof"
        except (TimeoutError, asyncio.TimeoutError):
            return "timeout"
        except (ConnectionError, OSError):
            return "reset"
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status = head.split(b"\r\n", 1)[0]
        return "ok" if b" 101 " in status + b" " else "http " + status.split(b" ")[1].decode("latin-1")

    def _frames(self):
        """Complete frames in the buffer: (opcode, payload), consumed."""
        out = []
        buf = self.buffer
        while len(buf) >= 2:
            opcode, n, offset = buf[0] & 0x0F, buf[1] & 0x7F, 2
            if n == 126:
                if len(buf) < 4:
                    break
                n, offset = struct.unpack("!H", buf[2:4])[0], 4
            elif n == 127:
                if len(buf) < 10:
                    break
                n, offset = struct.unpack("!Q", buf[2:10])[0], 10
            if len(buf) < offset + n:
                break
            out.append((opcode, buf[offset:offset + n]))
            buf = buf[offset + n:]
        self.buffer = buf
        return out

    async def ws_outcome(self, timeout: float) -> str:
        """Read until the gateway's close frame: "ws 1008"; "open" when nothing closed the socket within
        ``timeout``; "eof" for a TCP close without a close frame. Pongs are kept; media is skipped."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                for opcode, payload in self._frames():
                    if opcode == 0x8:
                        return f"ws {struct.unpack('!H', payload[:2])[0]}" if len(payload) >= 2 else "ws none"
                    if opcode == 0xA:
                        self.pongs.append(payload)
                if not await self._more(deadline):
                    return "eof"
        except (TimeoutError, asyncio.TimeoutError):
            return "open"
        except (ConnectionError, OSError):
            return "reset"


# ----- shapes Twilio sends --------------------------------------------------------------------------


def sid(prefix: str, rng: random.Random | None = None) -> str:
    return prefix + (rng or random).getrandbits(128).to_bytes(16, "big").hex()


def voice_form(call_sid: str, account_sid: str) -> dict[str, str]:
    return {"CallSid": call_sid, "AccountSid": account_sid, "From": "+15550100", "To": "+15550199",
            "CallStatus": "ringing", "Direction": "inbound", "ApiVersion": "2010-04-01"}


def status_form(call_sid: str, account_sid: str, stream_sid: str, event: str = "stream-started") -> dict[str, str]:
    return {"AccountSid": account_sid, "CallSid": call_sid, "StreamSid": stream_sid, "StreamName": stream_sid,
            "StreamEvent": event, "Timestamp": "2026-11-25T12:00:00.000Z"}


def start_message(stream_sid: str, call_sid: str, account_sid: str, parameters: dict | None) -> dict:
    start = {"accountSid": account_sid, "streamSid": stream_sid, "callSid": call_sid, "tracks": ["inbound"],
             "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}
    if parameters is not None:
        start["customParameters"] = parameters
    return {"event": "start", "sequenceNumber": "1", "start": start, "streamSid": stream_sid}


def media_message(stream_sid: str, seq: int, payload_b64: str, track: str = "inbound") -> bytes:
    return orjson.dumps({"event": "media", "sequenceNumber": str(seq),
                         "media": {"track": track, "chunk": str(seq), "timestamp": str(seq * 20), "payload": payload_b64},
                         "streamSid": stream_sid})


def dumps(value: object) -> bytes:
    """Compact JSON of anything hypothesis draws (the stdlib writes integers past 64 bits, orjson does not)."""
    return json.dumps(value, separators=(",", ":")).encode()


CONNECTED = orjson.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})
SILENCE_B64 = base64.b64encode(b"\xff" * FRAME_BYTES).decode()


# ----- the oracle: what docs/reference/wire.md and stream.py's table say each input gets -------------


_SID_RE = {p: re.compile(p + "[0-9a-fA-F]{32}") for p in ("CA", "AC", "MZ")}


def _is_sid(value: object, prefix: str) -> bool:
    return isinstance(value, str) and _SID_RE[prefix].fullmatch(value) is not None


def _is_counter(value: object) -> bool:
    return type(value) is str and 0 < len(value) <= 18 and value.isascii() and value.isdigit()


def strict_form(body: bytes) -> dict[str, str] | None:
    """The body as an application/x-www-form-urlencoded form read strictly (ASCII, UTF-8 escapes, every
    field with '=', at most MAX_FORM_FIELDS), or None: the gateway answers 400 "bad form" to such a body."""
    try:
        return dict(parse_qsl(body.decode("ascii"), keep_blank_values=True, strict_parsing=True,
                              encoding="utf-8", errors="strict", max_num_fields=MAX_FORM_FIELDS))
    except ValueError:
        return None


def webhook_fields_ok(path: str, form: dict[str, str]) -> bool:
    if path == "/twilio/voice":
        return (_is_sid(form.get("CallSid"), "CA") and _is_sid(form.get("AccountSid"), "AC")
                and "From" in form and "To" in form)
    return (form.get("StreamEvent") in STREAM_EVENTS and _is_sid(form.get("AccountSid"), "AC")
            and _is_sid(form.get("CallSid"), "CA") and _is_sid(form.get("StreamSid"), "MZ")
            and "StreamName" in form and "Timestamp" in form)


def expected_first_message(data: bytes) -> str:
    """A stream's first text message (followed by a media message, which is out of order before start)."""
    if len(data) > MAX_MESSAGE_BYTES:
        return "ws 1009"
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        return "ws 1007"
    if type(message) is not dict or type(message.get("event")) is not str:
        return "ws 1007"
    event = message["event"]
    if event not in KNOWN_EVENTS:
        return "ws 1008"
    if event == "connected":
        if type(message.get("protocol")) is not str or type(message.get("version")) is not str:
            return "ws 1007"
        return "ws 1008"  # then the media that follows comes before start
    if event == "start":
        return "ws 1007|ws 1008"  # malformed, or a forged token: never a call
    return "ws 1008"


def start_fields_ok(message: dict) -> bool:
    """stream.py's checks of a `start` (all 1007 when broken)."""
    if not _is_counter(message.get("sequenceNumber")) or not _is_sid(message.get("streamSid"), "MZ"):
        return False
    start = message.get("start")
    if type(start) is not dict or start.get("streamSid") != message["streamSid"] or type(start.get("streamSid")) is not str:
        return False
    if not _is_sid(start.get("accountSid"), "AC") or not _is_sid(start.get("callSid"), "CA"):
        return False
    tracks = start.get("tracks")
    if (type(tracks) is not list or not tracks or not all(type(t) is str and t in ("inbound", "outbound") for t in tracks)
            or len(set(tracks)) != len(tracks)):
        return False
    parameters = start.get("customParameters", {})
    if type(parameters) is not dict or not all(type(v) is str for v in parameters.values()):
        return False
    fmt = start.get("mediaFormat")
    return (type(fmt) is dict and type(fmt.get("encoding")) is str and type(fmt.get("sampleRate")) is int
            and type(fmt.get("channels")) is int
            and (fmt["encoding"], fmt["sampleRate"], fmt["channels"]) == ("audio/x-mulaw", 8000, 1))


def peer_close_answer(code: int | None, reason: bytes) -> str:
    """What the gateway answers to the peer's close frame (RFC 6455 5.5.1 and 7.4)."""
    if code is None:
        return "ws 1000"
    if not (1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999):
        return "ws 1002"
    try:
        reason.decode("utf-8")
    except UnicodeDecodeError:
        return "ws 1007"
    return f"ws {code}"


# ----- hypothesis: one pool of inputs per kind --------------------------------------------------------


def build_strategies():
    from hypothesis import strategies as st

    visible = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
    text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
    json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False,
                          allow_infinity=False), text)
    json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                              st.dictionaries(text, inner, max_size=4)), max_leaves=12)
    hexes = st.text("0123456789abcdefABCDEFxg", min_size=30, max_size=34)
    sid_like = st.one_of(st.builds(lambda p, h: p + h, st.sampled_from(["CA", "AC", "MZ", "ca", "XX", ""]), hexes), text)
    counter_like = st.one_of(st.from_regex(r"[0-9]{1,22}", fullmatch=True), text, st.integers(0, 99))
    paths = st.sampled_from(["/twilio/voice", "/twilio/status"])

    http_signature = st.fixed_dictionaries({
        "path": paths,
        "mode": st.sampled_from(["missing", "empty", "random", "wrong_url", "wrong_token", "tampered", "case", "valid"]),
        "junk": st.text(visible, min_size=1, max_size=40),
        "event": st.sampled_from(STREAM_EVENTS)})

    form_value = st.one_of(text, sid_like, st.sampled_from(STREAM_EVENTS + ("start", "stop", "")))
    http_form = st.fixed_dictionaries({
        "path": paths,
        "drop": st.lists(st.sampled_from(["CallSid", "AccountSid", "From", "To", "StreamSid", "StreamName",
                                          "StreamEvent", "Timestamp"]), max_size=3),
        "set": st.dictionaries(st.sampled_from(["CallSid", "AccountSid", "From", "To", "StreamSid", "StreamEvent",
                                                "Timestamp"]), form_value, max_size=3),
        "extra": st.dictionaries(text, text, max_size=6),
        "many": st.sampled_from([0, 0, 0, 150, 250]),
        "big": st.sampled_from([0, 0, 0, 0, 70_000])})

    urlencoded_garbage = st.text("abcXYZ019=&%+;._-~ \x00\x7f", max_size=200).map(lambda s: s.encode("latin-1"))
    http_garbage = st.fixed_dictionaries({
        "path": paths, "body": st.one_of(st.binary(max_size=600), urlencoded_garbage),
        "repeat": st.sampled_from([1, 1, 1, 1, 200]), "signature": st.one_of(st.none(), st.text(visible, max_size=30))})

    http_method = st.fixed_dictionaries({
        "method": st.one_of(st.sampled_from(["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "PROPFIND"]),
                            st.from_regex(r"[A-Z]{1,12}", fullmatch=True)),
        "path": st.one_of(st.sampled_from(["/twilio/voice", "/twilio/status", "/healthz", "/metrics", "/twilio/stream",
                                           "/", "/twilio/voice/", "/TWILIO/VOICE"]),
                          st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters="?#"),
                                  max_size=40).map(lambda s: "/" + s)),
        "query": st.sampled_from(["", "?x=1", "?"])})

    header_name = st.from_regex(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,30}", fullmatch=True).filter(
        lambda n: n.lower() not in ("content-length", "transfer-encoding", "host", "connection", "x-twilio-signature",
                                    "expect", "upgrade", "te", "trailer"))
    header_value = st.from_regex(r"[\x21-\x7e]([\x20-\x7e]{0,60}[\x21-\x7e])?", fullmatch=True)
    http_headers = st.fixed_dictionaries({
        "headers": st.lists(st.tuples(header_name, header_value), max_size=12),
        "pad": st.sampled_from([0, 0, 0, 8000, 15000, 17000, 30000]),
        "malformed": st.sampled_from([None, None, None, "no_colon", "space_before_colon", "nul"])})

    http_request_line = st.tuples(
        st.sampled_from([b"\x16\x03\x01", b"\x00", b"\xff", b"(", b" ", b"\x80", b"@"]),
        st.binary(max_size=300)).map(lambda t: (t[0] + t[1]).replace(b"\r\n\r\n", b"\r\n"))

    http_slow = st.fixed_dictionaries({
        "what": st.sampled_from(["head", "body", "upgrade", "trickle"]),
        "fraction": st.floats(0.0, 0.95), "interval": st.floats(0.3, 1.2)})

    flood = st.integers(1, 8)

    ws_handshake = st.fixed_dictionaries({
        "variant": st.sampled_from(["no_key", "bad_key", "no_connection", "post", "other_path"]),
        "key": st.text(visible, max_size=30), "path": st.sampled_from(["/twilio/streams", "/stream", "/twilio/stream/x"])})

    first_message = st.one_of(
        st.builds(lambda event, extra: dumps({**extra, "event": event}),
                  st.one_of(st.sampled_from(["connected", "media", "dtmf", "mark", "stop", "Start", "clear", ""]), text,
                            json_value),
                  st.dictionaries(st.sampled_from(["protocol", "version", "streamSid", "media", "sequenceNumber", "x"]),
                                  json_value, max_size=4)),
        json_value.map(dumps),
        text.map(lambda s: s.encode("utf-8")),
        st.binary(max_size=200),
        st.builds(lambda n: b'{"event":"media","pad":"' + b"a" * n + b'"}', st.sampled_from([65_000, 66_000])),
        st.builds(lambda n: b"[" * n + b"]" * n, st.integers(1, 3000)))
    ws_first_message = st.fixed_dictionaries({"data": first_message, "binary": st.sampled_from([False] * 9 + [True])})

    start_paths = st.sampled_from(["sequenceNumber", "streamSid", "start", "start.streamSid", "start.accountSid",
                                   "start.callSid", "start.tracks", "start.customParameters", "start.mediaFormat",
                                   "start.mediaFormat.encoding", "start.mediaFormat.sampleRate",
                                   "start.mediaFormat.channels"])
    start_values = st.one_of(json_value, sid_like, counter_like, st.sampled_from(
        [["inbound"], ["outbound", "inbound"], ["inbound", "inbound"], [], "audio/x-mulaw", 8000, 8000.0, 1, True,
         {"session_token": 5}, {}, "audio/x-alaw", 16000, 2]))
    ws_start = st.fixed_dictionaries({
        "token": st.sampled_from(["missing", "forged", "empty", "no_parameters"]),
        "forged": st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=40),
        "mutations": st.lists(st.tuples(st.sampled_from(["drop", "set"]), start_paths, start_values), max_size=2),
        "preface": st.sampled_from(["none", "none", "connected", "connected_twice", "media_first", "mark_first"])})

    ws_token = st.sampled_from(["wrong_call_then_replay", "wrong_call_then_replay", "live_then_replay"])

    stream_op = st.one_of(
        st.tuples(st.just("media"), st.integers(-3, 3)),
        st.tuples(st.just("dtmf"), st.sampled_from(list("0123456789*#ABCD") + ["", "E", "12", " "])),
        st.tuples(st.just("mark"), text),
        st.tuples(st.just("bad_base64"), st.text("ABCxyz+/=!-_ \n", min_size=1, max_size=216)),
        st.tuples(st.just("payload_size"), st.sampled_from([0, 1, 159, 161, 320, 4000, 48_000, 60_000])),
        st.tuples(st.just("wrong_sid"), st.booleans()),
        st.tuples(st.just("wrong_track"), st.just(0)),
        st.tuples(st.just("second_start"), st.just(0)),
        st.tuples(st.just("connected"), st.just(0)),
        st.tuples(st.just("unknown_event"), st.sampled_from(["clear", "foo", "Media", "STOP"])),
        st.tuples(st.just("stop"), st.booleans()),
        st.tuples(st.just("binary"), st.binary(max_size=50)),
        st.tuples(st.just("not_json"), text))
    ws_stream = st.fixed_dictionaries({"ops": st.lists(stream_op, min_size=1, max_size=8),
                                       "fragment": st.booleans()})

    ws_frames = st.fixed_dictionaries({
        "variant": st.sampled_from(["fragmented", "fragmented", "continuation_first", "text_inside_fragmented", "binary",
                                    "binary_fragmented", "unmasked", "rsv", "opcode", "big_ping", "fragmented_ping",
                                    "oversized_frame", "close", "close", "close", "non_minimal_length",
                                    "fragmented_too_big"]),
        "pieces": st.integers(2, 12), "pings": st.booleans(), "rsv": st.integers(1, 7),
        "opcode": st.sampled_from([3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF]), "ping_size": st.integers(126, 400),
        "close_code": st.one_of(st.none(), st.integers(0, 6000), st.sampled_from([1000, 1001, 1005, 1006, 1015, 3000, 4999, 5000])),
        "close_reason": st.one_of(st.text(max_size=20).map(lambda s: s.encode("utf-8", "surrogatepass")[:100]),
                                  st.just(b"\xff\xfe")),
        "close_size": st.sampled_from([2, 2, 2, 1]),
        "message": st.sampled_from(["forged_start", "not_json", "array"])})

    ws_ping_flood = st.fixed_dictionaries({"pings": st.integers(20, 300), "payload": st.binary(max_size=125),
                                           "unsolicited_pongs": st.integers(0, 5)})
    ws_never_start = st.fixed_dictionaries({"connected": st.booleans(), "pings": st.integers(0, 3)})

    return {
        "http_signature": http_signature, "http_form": http_form, "http_garbage": http_garbage,
        "http_method": http_method, "http_headers": http_headers, "http_request_line": http_request_line,
        "http_slow": http_slow, "flood": flood, "ws_handshake": ws_handshake, "ws_first_message": ws_first_message,
        "ws_start": ws_start, "ws_token": ws_token, "ws_stream": ws_stream, "ws_frames": ws_frames,
        "ws_ping_flood": ws_ping_flood, "ws_never_start": ws_never_start,
    }


def draw_pools(pool_size: int, seed: int, kinds: list[str] | None = None) -> dict[str, list]:
    """``pool_size`` inputs per kind from seeded hypothesis runs (generate phase only, no I/O inside)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    pools: dict[str, list] = {}
    for index, (kind, strategy) in enumerate(build_strategies().items()):
        if kinds and kind not in kinds:
            continue
        pools[kind] = drawn = []

        @hypothesis_seed(seed + index)
        @settings(max_examples=pool_size, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def collect(example) -> None:
            drawn.append(example)  # noqa: B023 (run right here, once)

        collect()
    return pools


# ----- the probes ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Target:
    host: str
    port: int
    base_url: str  # the gateway's public base URL: what Twilio signs
    token: str
    per_address_cap: int
    max_pending: int = 64  # the gateway's cap on pending connections in all (max_pending_connections)


@dataclasses.dataclass
class Outcome:
    """One input's result; ``expected`` may list alternatives separated by '|'."""

    kind: str
    expected: str
    got: str
    example: str

    @property
    def documented(self) -> bool:
        return self.got in self.expected.split("|")


def _short(value: object, limit: int = 140) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def http_request(method: str, path: str, body: bytes = b"", headers: list[tuple[str, str]] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers or []]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
        lines.append("Content-Type: application/x-www-form-urlencoded")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Attacker:
    def __init__(self, target: Target, pools: dict[str, list], rate: float, concurrency: int, seed: int) -> None:
        self.target = target
        self.pools = pools
        self.rate = rate
        # The gateway's pending-connection cap is shared with the good calls: the attack's connections at
        # once (a flood's held ones, the slow kinds' SLOW_AT_ONCE, the rest) stay PENDING_MARGIN below it,
        # so every input meets only the cap it is meant to test. No room for a whole flood: no flood.
        # A flood runs alone (the other inputs in flight drain first, only the slow kinds stay), at most
        # every FLOOD_EVERY_S.
        room = target.max_pending - PENDING_MARGIN - SLOW_AT_ONCE
        if not 0 < target.per_address_cap <= room:
            self.target = target = dataclasses.replace(target, per_address_cap=0)
        self.concurrency = asyncio.Semaphore(max(1, min(concurrency, room)))
        self.fast_in_flight = 0
        self.last_flood = 0.0
        self.rng = random.Random(seed)
        self.outcomes: list[Outcome] = []
        self.errors: list[str] = []
        self._probe_address = 0
        self._flood_address = 0
        self._cursor = {kind: 0 for kind in pools}
        # kinds that hold a connection for seconds, or take a call slot: their own small limits
        self.slow = asyncio.Semaphore(SLOW_AT_ONCE)
        self.slot_lock = asyncio.Lock()
        self.flood_lock = asyncio.Lock()
        self.last_slot_use = 0.0

    # -- helpers

    def source(self) -> str:
        self._probe_address = (self._probe_address + 1) % len(PROBE_ADDRESSES)
        return PROBE_ADDRESSES[self._probe_address]

    def next_input(self, kind: str):
        pool = self.pools[kind]
        item = pool[self._cursor[kind] % len(pool)]
        self._cursor[kind] += 1
        return item

    def record(self, kind: str, expected: str, got: str, example: object) -> None:
        self.outcomes.append(Outcome(kind, expected, got, _short(example)))

    async def connect(self, source: str | None = None) -> Conn:
        return await Conn.open(self.target.host, self.target.port, source or self.source())

    async def http(self, kind: str, request: bytes, expected: str, example: object, timeout: float = 3.0) -> None:
        conn = await self.connect()
        try:
            conn.send(request)
            got = await conn.http_status(timeout)
        finally:
            conn.close()
        self.record(kind, expected, got, example)

    def sign(self, path: str, form: dict[str, str], token: str | None = None) -> str:
        return compute_signature(token or self.target.token, self.target.base_url + path, form)

    async def issue_token(self, call_sid: str) -> str | None:
        """A real session token for ``call_sid``: the signed voice webhook a real call starts with."""
        form = voice_form(call_sid, sid("AC"))
        body = urlencode(form).encode()
        conn = await self.connect()
        try:
            conn.send(http_request("POST", "/twilio/voice", body, [("X-Twilio-Signature", self.sign("/twilio/voice", form))]))
            status = await conn.http_status(3.0)
            deadline = time.monotonic() + 3.0
            while b"</Response>" not in conn.buffer:
                if not await conn._more(deadline):
                    break
        except (TimeoutError, asyncio.TimeoutError, OSError):
            return None
        finally:
            conn.close()
        if status != "http 200":
            return None
        match = re.search(rb'name="session_token" value="([^"]+)"', conn.buffer)
        return match.group(1).decode() if match else None

    async def stream(self) -> Conn | None:
        conn = await self.connect()
        state = await conn.upgrade()
        if state != "ok":
            conn.close()
            self.errors.append(f"upgrade failed: {state}")
            return None
        return conn

    # -- kinds: HTTP

    async def http_signature(self, item: dict) -> None:
        path = item["path"]
        form = voice_form(sid("CA"), sid("AC")) if path == "/twilio/voice" else status_form(
            sid("CA"), sid("AC"), sid("MZ"), item["event"])
        signature = self.sign(path, form)
        mode = item["mode"]
        sent_form = dict(form)
        if mode == "missing":
            signature = None
        elif mode == "empty":
            signature = ""
        elif mode == "random":
            signature = item["junk"]
        elif mode == "wrong_url":
            signature = compute_signature(self.target.token, self.target.base_url + path + "x", form)
        elif mode == "wrong_token":
            signature = self.sign(path, form, token=self.target.token + "x")
        elif mode == "tampered":
            key = sorted(sent_form)[len(item["junk"]) % len(sent_form)]
            sent_form[key] += "0"
        elif mode == "case":
            signature = signature.swapcase() if signature.swapcase() != signature else signature + "A"
        headers = [] if signature is None else [("X-Twilio-Signature", signature)]
        expected = ("http 200" if path == "/twilio/voice" else "http 204") if mode == "valid" else "http 403"
        await self.http("http_signature", http_request("POST", path, urlencode(sent_form).encode(), headers), expected,
                        {"path": path, "mode": mode})

    async def http_form(self, item: dict) -> None:
        path = item["path"]
        form = voice_form(sid("CA"), sid("AC")) if path == "/twilio/voice" else status_form(sid("CA"), sid("AC"), sid("MZ"))
        for key in item["drop"]:
            form.pop(key, None)
        form.update(item["set"])
        form.update(item["extra"])
        for i in range(item["many"]):
            form[f"F{i}"] = "x"
        if item["big"]:
            form["Pad"] = "p" * item["big"]
        body = urlencode(form).encode()
        if len(body) > MAX_BODY_BYTES:
            expected = "http 413"
        elif len(form) > MAX_FORM_FIELDS:
            expected = "http 400"
        else:
            expected = ("http 200" if path == "/twilio/voice" else "http 204") if webhook_fields_ok(path, form) else "http 400"
        headers = [("X-Twilio-Signature", self.sign(path, form))]
        await self.http("http_form", http_request("POST", path, body, headers), expected,
                        {k: v for k, v in form.items() if not k.startswith("F") and k != "Pad"})

    async def http_garbage(self, item: dict) -> None:
        body = item["body"] * item["repeat"]
        if len(body) > MAX_BODY_BYTES:
            expected = "http 413"
        elif strict_form(body) is None:
            expected = "http 400"
        else:
            expected = "http 403"
        headers = [] if item["signature"] is None else [("X-Twilio-Signature", item["signature"])]
        await self.http("http_garbage", http_request("POST", item["path"], body, headers), expected,
                        {"path": item["path"], "body": body[:60], "bytes": len(body)})

    async def http_method(self, item: dict) -> None:
        method, path = item["method"], item["path"]
        if method == "POST" and path in ("/twilio/voice", "/twilio/status"):
            method = "PUT"
        if path in ("/twilio/voice", "/twilio/status"):
            expected = "http 405"
        elif path in ("/healthz", "/metrics"):
            expected = "http 200" if method == "GET" else "http 405"
        else:
            expected = "http 404"
        await self.http("http_method", http_request(method, path + item["query"]), expected, (method, path + item["query"]))

    async def http_headers(self, item: dict) -> None:
        form = voice_form(sid("CA"), sid("AC"))
        body = urlencode(form).encode()
        headers = [("X-Twilio-Signature", self.sign("/twilio/voice", form)), *item["headers"]]
        if item["pad"]:
            headers.append(("X-Pad", "p" * item["pad"]))
        request = http_request("POST", "/twilio/voice", body, headers)
        head = request.split(b"\r\n\r\n", 1)[0]
        malformed = item["malformed"]
        if malformed:
            line = {"no_colon": b"X-Broken header", "space_before_colon": b"X-Broken : value",
                    "nul": b"X-Broken: a\x00b"}[malformed]
            head = head + b"\r\n" + line
            request = head + b"\r\n\r\n" + body
        expected = "http 431" if len(head) > MAX_HEAD_BYTES else ("http 400" if malformed else "http 200")
        await self.http("http_headers", request, expected,
                        {"headers": item["headers"][:3], "head_bytes": len(head), "malformed": malformed})

    async def http_request_line(self, item: bytes) -> None:
        await self.http("http_request_line", item + b"\r\n\r\n", "http 400", item[:60])

    async def http_slow(self, item: dict) -> None:
        async with self.slow:
            what = item["what"]
            form = voice_form(sid("CA"), sid("AC"))
            full = http_request("POST", "/twilio/voice", urlencode(form).encode(),
                                [("X-Twilio-Signature", self.sign("/twilio/voice", form))])
            head_end = full.index(b"\r\n\r\n") + 4
            if what == "upgrade":
                full = (b"GET /twilio/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        b"Sec-WebSocket-Key: " + base64.b64encode(os.urandom(16)) + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
                head_end = len(full)
            cut = (head_end + int((len(full) - head_end) * item["fraction"]) if what == "body"
                   else max(1, int((head_end - 4) * item["fraction"])))
            conn = await self.connect()
            opened = time.monotonic()
            try:
                if what == "trickle":
                    # one byte at a time, never fast enough to finish the head within the timeout
                    step = max(0.3, item["interval"])
                    sent = 0
                    while time.monotonic() - opened < HEAD_TIMEOUT_S + 2 and sent < head_end - 4:
                        conn.send(full[sent:sent + 1])
                        sent += 1
                        status = await conn.http_status(step)
                        if status != "timeout":
                            break
                    else:
                        status = await conn.http_status(HEAD_TIMEOUT_S + 2 - (time.monotonic() - opened))
                else:
                    conn.send(full[:cut])
                    status = await conn.http_status(HEAD_TIMEOUT_S + 2.5)
            finally:
                conn.close()
            waited = time.monotonic() - opened
            if status == "http 408" and waited < HEAD_TIMEOUT_S - 0.5:
                status = f"http 408 after {waited:.1f} s"
            self.record("http_slow", "http 408", status, {"what": what, "sent": cut, "of": len(full)})

    async def flood(self, extra: int) -> None:
        cap = self.target.per_address_cap
        if cap <= 0:
            return  # no per-address cap to test, or no room for a flood under the cap in all
        async with self.flood_lock:
            self._flood_address = (self._flood_address + 1) % len(FLOOD_ADDRESSES)
            address = FLOOD_ADDRESSES[self._flood_address]
            conns: list[Conn] = []
            try:
                for _ in range(cap + extra):
                    conns.append(await Conn.open(self.target.host, self.target.port, address))
                answers = await asyncio.gather(*(conn.http_status(0.5) for conn in conns))
            finally:
                for conn in conns:
                    conn.close()
            held = sum(1 for a in answers if a == "timeout")
            refused = sum(1 for a in answers if a == "http 503")
            example = {"address": address, "opened": len(conns), "held": held, "refused": refused}
            # Per connection: the first `cap` held, the rest 503. Counted by totals (accept order is the kernel's).
            for i in range(cap + extra):
                expected = "held" if i < cap else "http 503"
                got = expected
                if i < cap and i >= held:
                    got = "http 503" if refused > extra else "other"
                elif i >= cap and i - cap >= refused:
                    got = "held" if held > cap else "other"
                self.record("flood", expected, got, example)
            await asyncio.sleep(0.3)  # let the gateway see the closes before the next flood

    async def ws_handshake(self, item: dict) -> None:
        variant = item["variant"]
        key = item["key"]
        try:
            valid_key = len(base64.b64decode(key, validate=True)) == 16
        except (binascii.Error, ValueError):
            valid_key = False
        headers = {"Host": "127.0.0.1", "Upgrade": "websocket", "Connection": "Upgrade",
                   "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(), "Sec-WebSocket-Version": "13"}
        method, path, expected = "GET", "/twilio/stream", "http 400"
        if variant == "no_key":
            del headers["Sec-WebSocket-Key"]
        elif variant == "bad_key":
            headers["Sec-WebSocket-Key"] = key
            expected = "http 101" if valid_key else "http 400"
        elif variant == "no_connection":
            del headers["Connection"]
        elif variant == "post":
            method, expected = "POST", "http 404"
            headers["Content-Length"] = "0"
        else:
            path, expected = item["path"], "http 404"
        request = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        await self.http("ws_handshake", request.encode("latin-1"), expected, {"variant": variant, "key": key})

    # -- kinds: the stream before start

    async def ws_first_message(self, item: dict) -> None:
        data, binary = item["data"], item["binary"]
        conn = await self.stream()
        if conn is None:
            return
        try:
            if binary:
                conn.send(ws_frame(0x2, data) if len(data) <= MAX_MESSAGE_BYTES else self._fragments(0x2, data, 4))
                expected = "ws 1003" if len(data) <= MAX_MESSAGE_BYTES else "ws 1009"
            else:
                conn.send(ws_frame(0x1, data) if len(data) <= MAX_MESSAGE_BYTES else self._fragments(0x1, data, 4))
                conn.send(ws_frame(0x1, media_message(sid("MZ"), 2, SILENCE_B64)))
                expected = expected_first_message(data)
            got = await conn.ws_outcome(3.0)
        finally:
            conn.close()
        self.record("ws_first_message", expected, got, {"data": data[:80], "bytes": len(data), "binary": binary})

    @staticmethod
    def _fragments(opcode: int, data: bytes, pieces: int, pings: bool = False) -> bytes:
        size = max(1, -(-len(data) // pieces))
        chunks = [data[i:i + size] for i in range(0, len(data), size)] or [b""]
        out = b""
        for i, chunk in enumerate(chunks):
            out += ws_frame(opcode if i == 0 else 0x0, chunk, fin=i == len(chunks) - 1)
            if pings and i < len(chunks) - 1:
                out += ws_frame(0x9, b"between")  # control frames may come between fragments (RFC 6455 5.4)
        return out

    async def ws_start(self, item: dict) -> None:
        stream_sid, call_sid, account_sid = sid("MZ"), sid("CA"), sid("AC")
        token = item["token"]
        parameters = (None if token == "no_parameters" else {} if token == "missing"
                      else {"session_token": ""} if token == "empty" else {"session_token": item["forged"]})
        message = start_message(stream_sid, call_sid, account_sid, parameters)
        for action, path, value in item["mutations"]:
            node, keys = message, path.split(".")
            for key in keys[:-1]:
                node = node.get(key) if type(node) is dict else None
            if type(node) is not dict:
                continue
            if action == "drop":
                node.pop(keys[-1], None)
            else:
                node[keys[-1]] = value
        data = dumps(message)
        preface = item["preface"]
        sends = {"none": [], "connected": [CONNECTED], "connected_twice": [CONNECTED, CONNECTED],
                 "media_first": [media_message(stream_sid, 1, SILENCE_B64)],
                 "mark_first": [orjson.dumps({"event": "mark", "sequenceNumber": "1", "streamSid": stream_sid,
                                              "mark": {"name": "1:5"}})]}[preface]
        if preface in ("connected_twice", "media_first", "mark_first"):
            expected = "ws 1008"
        elif len(data) > MAX_MESSAGE_BYTES:
            expected = "ws 1009"
        elif not start_fields_ok(message):
            expected = "ws 1007"
        else:
            expected = "ws 1008"  # the token: missing, empty, or never issued
        conn = await self.stream()
        if conn is None:
            return
        try:
            for message_bytes in [*sends, data]:
                conn.send(ws_frame(0x1, message_bytes))
            got = await conn.ws_outcome(3.0)
        finally:
            conn.close()
        self.record("ws_start", expected, got, {"preface": preface, "token": token, "start": data[:100]})

    # -- kinds that need a real token

    async def ws_token(self, variant: str) -> None:
        call_sid = sid("CA")
        token = await self.issue_token(call_sid)
        if token is None:
            self.errors.append("ws_token: the voice webhook issued no token")
            return
        account_sid = sid("AC")

        async def start_with(sid_of_call: str) -> tuple[Conn | None, str]:
            conn = await self.stream()
            if conn is None:
                return None, "no upgrade"
            conn.send(ws_frame(0x1, CONNECTED) + ws_frame(0x1, orjson.dumps(
                start_message(sid("MZ"), sid_of_call, account_sid, {"session_token": token}))))
            return conn, await conn.ws_outcome(0.4 if sid_of_call == call_sid and variant == "live_then_replay" else 3.0)

        if variant == "wrong_call_then_replay":
            for step, who in (("issued for another call", sid("CA")), ("reused", call_sid)):
                conn, got = await start_with(who)
                if conn is not None:
                    conn.close()
                self.record("ws_token", "ws 1008", got, {"step": step})
            return
        async with self.slot_lock:
            await asyncio.sleep(max(0.0, self.last_slot_use + 1.0 - time.monotonic()))
            self.last_slot_use = time.monotonic()
            live, got = await start_with(call_sid)
            if live is None:
                return
            try:
                self.record("ws_token", "open|ws 1013", got, {"step": "live call"})
                replay, replay_got = await start_with(call_sid)
                if replay is not None:
                    replay.close()
                self.record("ws_token", "ws 1008", replay_got, {"step": "replayed while live"})
                if got == "open":
                    live.send(ws_frame(0x1, orjson.dumps({"event": "stop", "sequenceNumber": "9", "streamSid": "x"})))
                    # a stop must name the stream: this one names another, so the live call ends 1008 (policy)
                    self.record("ws_token", "ws 1008", await live.ws_outcome(3.0), {"step": "stop of another stream"})
            finally:
                live.close()

    async def ws_stream(self, item: dict) -> None:
        async with self.slot_lock:
            await asyncio.sleep(max(0.0, self.last_slot_use + 1.0 - time.monotonic()))
            self.last_slot_use = time.monotonic()
            call_sid, account_sid, stream_sid = sid("CA"), sid("AC"), sid("MZ")
            token = await self.issue_token(call_sid)
            if token is None:
                self.errors.append("ws_stream: the voice webhook issued no token")
                return
            conn = await self.stream()
            if conn is None:
                return
            try:
                conn.send(ws_frame(0x1, CONNECTED) + ws_frame(0x1, orjson.dumps(
                    start_message(stream_sid, call_sid, account_sid, {"session_token": token}))))
                accepted = await conn.ws_outcome(0.3)
                if accepted != "open":
                    self.record("ws_stream", "ws 1013", accepted, {"step": "start"})
                    return
                expected = None
                seq = 2
                out = b""
                names = []
                for op, arg in item["ops"]:
                    data, opcode, verdict = self._stream_op(op, arg, seq, stream_sid, call_sid, account_sid)
                    names.append(op)
                    seq += 1
                    out += (self._fragments(opcode, data, 3, pings=True) if item["fragment"] and len(data) > 3
                            else ws_frame(opcode, data)) if len(data) <= MAX_MESSAGE_BYTES else self._fragments(opcode, data, 4)
                    if verdict is not None:
                        expected = verdict
                        break
                if expected is None:
                    out += ws_frame(0x1, orjson.dumps({"event": "stop", "sequenceNumber": str(seq), "streamSid": stream_sid,
                                                       "stop": {"accountSid": account_sid, "callSid": call_sid}}))
                    expected = "ws 1000"
                conn.send(out)
                got = await conn.ws_outcome(3.0)
            finally:
                conn.close()
            self.record("ws_stream", expected, got, {"ops": names, "last": _short(item["ops"][len(names) - 1], 60),
                                                     "fragmented": item["fragment"]})

    @staticmethod
    def _stream_op(op: str, arg, seq: int, stream_sid: str, call_sid: str, account_sid: str):
        """(message bytes, opcode, expected close or None when the message is fine) for one op after start."""
        if op == "media":
            return media_message(stream_sid, max(1, seq + arg), SILENCE_B64), 0x1, None
        if op == "dtmf":
            ok = arg in "0123456789*#ABCD" and len(arg) == 1
            return (orjson.dumps({"event": "dtmf", "sequenceNumber": str(seq), "streamSid": stream_sid,
                                  "dtmf": {"track": "inbound_track", "digit": arg}}), 0x1, None if ok else "ws 1007")
        if op == "mark":
            return (orjson.dumps({"event": "mark", "sequenceNumber": str(seq), "streamSid": stream_sid,
                                  "mark": {"name": arg}}), 0x1, None)
        if op == "bad_base64":
            try:
                ok = len(binascii.a2b_base64(arg.encode(), strict_mode=True)) == FRAME_BYTES
            except (binascii.Error, ValueError):
                ok = False
            return media_message(stream_sid, seq, arg), 0x1, None if ok else "ws 1007"
        if op == "payload_size":
            data = media_message(stream_sid, seq, base64.b64encode(b"\x7f" * arg).decode())
            return data, 0x1, "ws 1009" if len(data) > MAX_MESSAGE_BYTES else (None if arg == FRAME_BYTES else "ws 1007")
        if op == "wrong_sid":
            other = sid("MZ") if arg else "MZ"
            return media_message(other, seq, SILENCE_B64), 0x1, "ws 1008"
        if op == "wrong_track":
            return media_message(stream_sid, seq, SILENCE_B64, track="outbound"), 0x1, "ws 1007"
        if op == "second_start":
            return orjson.dumps(start_message(stream_sid, call_sid, account_sid, {"session_token": "x"})), 0x1, "ws 1008"
        if op == "connected":
            return CONNECTED, 0x1, "ws 1008"
        if op == "unknown_event":
            return orjson.dumps({"event": arg, "streamSid": stream_sid}), 0x1, "ws 1008"
        if op == "stop":
            own = arg
            return (orjson.dumps({"event": "stop", "sequenceNumber": str(seq), "streamSid": stream_sid,
                                  "stop": {"accountSid": account_sid, "callSid": call_sid if own else sid("CA")}}),
                    0x1, "ws 1000" if own else "ws 1008")
        if op == "binary":
            return arg, 0x2, "ws 1003"
        # not_json: text that cannot be JSON (it starts with '#')
        return b"#" + arg.encode("utf-8"), 0x1, "ws 1007"

    # -- kinds: framing, pings, silence

    async def ws_frames(self, item: dict) -> None:
        variant = item["variant"]
        message = {"forged_start": orjson.dumps(start_message(sid("MZ"), sid("CA"), sid("AC"), {"session_token": "forged"})),
                   "not_json": b"{not json", "array": b"[1,2,3]"}[item["message"]]
        message_code = "ws 1008" if item["message"] == "forged_start" else "ws 1007"
        example: dict = {"variant": variant}
        if variant == "fragmented":
            data, expected = self._fragments(0x1, message, item["pieces"], item["pings"]), message_code
            example["pieces"] = item["pieces"]
        elif variant == "fragmented_too_big":
            data, expected = self._fragments(0x1, b'{"event":"' + b"x" * 70_000 + b'"}', item["pieces"]), "ws 1009"
        elif variant == "continuation_first":
            data, expected = ws_frame(0x0, message), "ws 1002"
        elif variant == "text_inside_fragmented":
            data, expected = ws_frame(0x1, message[:5], fin=False) + ws_frame(0x1, message), "ws 1002"
        elif variant == "binary":
            data, expected = ws_frame(0x2, message), "ws 1003"
        elif variant == "binary_fragmented":
            data, expected = self._fragments(0x2, message, item["pieces"]), "ws 1003"
        elif variant == "unmasked":
            data, expected = ws_frame(0x1, message, mask=False), "ws 1002"
        elif variant == "rsv":
            data, expected = ws_frame(0x1, message, rsv=item["rsv"]), "ws 1002"
            example["rsv"] = item["rsv"]
        elif variant == "opcode":
            data, expected = ws_frame(item["opcode"], message), "ws 1002"
            example["opcode"] = item["opcode"]
        elif variant == "big_ping":
            data, expected = ws_frame(0x9, b"p" * item["ping_size"]), "ws 1002"
        elif variant == "fragmented_ping":
            data, expected = ws_frame(0x9, b"p", fin=False), "ws 1002"
        elif variant == "oversized_frame":
            data, expected = ws_frame(0x1, b"x" * (MAX_MESSAGE_BYTES + 1 + item["ping_size"])), "ws 1009"
        elif variant == "non_minimal_length":
            data, expected = ws_frame(0x1, message, length_form=127), "ws 1002"
        else:  # close
            code, reason = item["close_code"], item["close_reason"]
            if item["close_size"] == 1:
                data, expected = ws_frame(0x8, b"\x03"), "ws 1002"
            elif code is None:
                data, expected = ws_frame(0x8, b""), "ws 1000"
            else:
                code = code & 0xFFFF
                if not (1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999):
                    reason = b""  # which of two faults is named first is picows' business
                data, expected = ws_frame(0x8, struct.pack("!H", code) + reason), peer_close_answer(code, reason)
            example.update(code=code, reason=reason[:20])
        conn = await self.stream()
        if conn is None:
            return
        try:
            conn.send(data)
            got = await conn.ws_outcome(3.0)
        finally:
            conn.close()
        self.record("ws_frames", expected, got, example)

    async def ws_ping_flood(self, item: dict) -> None:
        conn = await self.stream()
        if conn is None:
            return
        n, payload = item["pings"], item["payload"]
        try:
            data = b"".join(ws_frame(0xA, b"unsolicited") for _ in range(item["unsolicited_pongs"]))
            data += b"".join(ws_frame(0x9, payload + str(i).encode()[: 125 - len(payload)]) for i in range(n))
            conn.send(data)
            conn.send(ws_frame(0x1, orjson.dumps(start_message(sid("MZ"), sid("CA"), sid("AC"), {"session_token": "f"}))))
            code = await conn.ws_outcome(5.0)
        finally:
            conn.close()
        wanted = [(payload + str(i).encode()[: 125 - len(payload)]) for i in range(n)]
        answered = "all pongs" if conn.pongs == wanted else f"{sum(1 for a, b in zip(conn.pongs, wanted) if a == b)}/{n} pongs"
        self.record("ws_ping_flood", "all pongs, ws 1008", f"{answered}, {code}", {"pings": n, "payload": payload[:20]})

    async def ws_never_start(self, item: dict) -> None:
        async with self.slow:
            conn = await self.stream()
            if conn is None:
                return
            opened = time.monotonic()
            try:
                if item["connected"]:
                    conn.send(ws_frame(0x1, CONNECTED))
                for _ in range(item["pings"]):
                    conn.send(ws_frame(0x9, b"alive?"))
                got = await conn.ws_outcome(START_DEADLINE_S + 3)
            finally:
                conn.close()
            waited = time.monotonic() - opened
            if got == "ws 1008" and waited < START_DEADLINE_S - 0.5:
                got = f"ws 1008 after {waited:.1f} s"
            self.record("ws_never_start", "ws 1008", got, item)

    # -- the schedule

    WEIGHTS = {"http_signature": 8, "http_form": 8, "http_garbage": 8, "http_method": 6, "http_headers": 6,
               "http_request_line": 4, "http_slow": 1, "flood": 1, "ws_handshake": 3, "ws_first_message": 10,
               "ws_start": 10, "ws_token": 2, "ws_stream": 2, "ws_frames": 10, "ws_ping_flood": 2, "ws_never_start": 1}

    async def run(self, seconds: float) -> None:
        kinds = [k for k in self.WEIGHTS if k in self.pools and self.pools[k]]
        weights = [self.WEIGHTS[k] for k in kinds]
        end = time.monotonic() + seconds
        tasks: set[asyncio.Task] = set()
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while time.monotonic() < end:
            kind = self.rng.choices(kinds, weights)[0]
            # one at a time for the kinds with their own lock: skip when busy rather than queue up
            if ((kind in ("ws_token", "ws_stream") and self.slot_lock.locked())
                    or (kind == "flood" and (time.monotonic() - self.last_flood < FLOOD_EVERY_S or not self.target.per_address_cap))
                    or (kind in ("http_slow", "ws_never_start") and self.slow.locked())):
                await asyncio.sleep(0.005)
                continue
            if kind == "flood":
                while self.fast_in_flight:
                    await asyncio.sleep(0.01)
                await self.concurrency.acquire()
                await self._one(kind, self.next_input(kind))
                self.last_flood = time.monotonic()
                next_at = time.monotonic()
                continue
            await self.concurrency.acquire()
            task = asyncio.create_task(self._one(kind, self.next_input(kind)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - 1.0)  # no burst to catch up after a stall
        if tasks:
            await asyncio.wait(tasks, timeout=START_DEADLINE_S + 10)

    async def _one(self, kind: str, item) -> None:
        fast = kind not in ("http_slow", "ws_never_start")
        self.fast_in_flight += fast
        try:
            await getattr(self, kind)(item)
        except (OSError, asyncio.TimeoutError, TimeoutError) as exc:
            self.errors.append(f"{kind}: {type(exc).__name__}: {exc}"[:200])
        finally:
            self.fast_in_flight -= fast
            self.concurrency.release()

    def report(self) -> dict:
        by_kind: dict[str, dict] = {}
        for outcome in self.outcomes:
            entry = by_kind.setdefault(outcome.kind, {"tried": 0, "closed_as_documented": 0, "unexpected": []})
            entry["tried"] += 1
            if outcome.documented:
                entry["closed_as_documented"] += 1
            elif len(entry["unexpected"]) < EXAMPLES_PER_KIND:
                entry["unexpected"].append(f"expected {outcome.expected}, got {outcome.got}: {outcome.example}")
        unexpected = sum(v["tried"] - v["closed_as_documented"] for v in by_kind.values())
        return {"inputs_tried": len(self.outcomes), "unexpected_total": unexpected,
                "by_kind": dict(sorted(by_kind.items())), "attacker_errors": len(self.errors),
                "attacker_error_examples": self.errors[:5]}


async def attack(target: Target, seconds: float, rate: float, concurrency: int, pools: dict[str, list], seed: int) -> dict:
    attacker = Attacker(target, pools, rate, concurrency, seed)
    started = time.monotonic()
    await attacker.run(seconds)
    report = attacker.report()
    report["seconds"] = round(time.monotonic() - started, 2)
    report["rate_limit_per_s"] = rate
    return report


def target_from(base_url: str, token: str, per_address_cap: int, max_pending: int = 64, connect: str = "") -> Target:
    parts = urlsplit(connect or base_url)
    return Target(parts.hostname or "127.0.0.1", parts.port or 80, base_url.rstrip("/"), token, per_address_cap,
                  max_pending)


# ----- the bench side: `voicecore bench --bad-input` ---------------------------------------------------
# (bench.run is imported inside: the attacker process above stays light)

AFTER_ATTACK_S = 3.0  # memory is sampled this long after the attack stopped
GOOD_CALL_KEYS = ("underruns", "underruns_audio_available", "stale_frames", "calls_completed")


def rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory_figures(before: dict[str, int], after: dict[str, int]) -> dict:
    """RSS in kB of the gateway and of every stack process, before and after, and the growth in %."""

    def growth(a: int, b: int) -> float:
        return round((b - a) * 100.0 / a, 2) if a else 0.0

    return {"gateway_rss_kb_before": before.get("gateway", 0), "gateway_rss_kb_after": after.get("gateway", 0),
            "growth_pct": growth(before.get("gateway", 0), after.get("gateway", 0)),
            "by_process": {name: {"rss_kb_before": kb, "rss_kb_after": after.get(name, 0),
                                  "growth_pct": growth(kb, after.get(name, 0))} for name, kb in sorted(before.items())}}


def good_call_figures(report: dict) -> dict:
    figures = {"lateness_p99_ms": report.get("lateness_ms", {}).get("p99", 0.0)}
    figures.update({key: report.get(key, 0) for key in GOOD_CALL_KEYS})
    return figures


def tracebacks_in(log_text: str) -> list[str]:
    """Each Traceback in the stack's log, as the line that names the exception (its last line)."""
    found = []
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Traceback"):
            j = i + 1
            while j < len(lines) and (lines[j].startswith((" ", "\t")) or not lines[j].strip()):
                j += 1
            found.append(lines[j][:200] if j < len(lines) else "Traceback")
    return found


def bad_input_figures(without: dict, with_attack: dict, campaign: dict, memory: dict, control_memory: dict,
                      restarted: list[str], tracebacks: list[str]) -> dict:
    """The report's ``bad_input``: the attacker's counts, crashes, both runs' good calls, memory."""
    good_without, good_with = good_call_figures(without), good_call_figures(with_attack)
    return {
        "inputs_tried": campaign.get("inputs_tried", 0),
        "unexpected_total": campaign.get("unexpected_total", 0),
        "by_kind": campaign.get("by_kind", {}),
        "crashes": len(restarted) + len(tracebacks),
        "crash_detail": {"restarted": restarted, "tracebacks": len(tracebacks), "traceback_examples": tracebacks[:5]},
        "good_calls": {"without": good_without, "with": good_with},
        "lateness_p99_delta_ms": round(good_with["lateness_p99_ms"] - good_without["lateness_p99_ms"], 3),
        "memory": {**memory, "without_attack": control_memory},
        "attacker": {key: campaign.get(key) for key in ("seconds", "rate_limit_per_s", "attacker_errors",
                                                         "attacker_error_examples", "error")},
    }


def make_attacked_run(opts, calls: int, workdir: Path, attack: bool):
    """A bench run (bench/run.py LevelRun) with the attacker running through its measured window (or, with
    ``attack`` False, the same samples without it: the control)."""
    from bench.pinning import pin_tree
    from bench.run import LevelRun

    class AttackedRun(LevelRun):
        def __init__(self) -> None:
            super().__init__(opts, calls, workdir)
            self.attack = attack
            self.campaign: dict = {}
            self.memory: dict = {}
            self.restarted: list[str] = []
            self.attacker: asyncio.subprocess.Process | None = None

        async def measure(self, t0_ms: float):
            watch = asyncio.create_task(self.watch(t0_ms + self.ramp_ms + self.settle_ms))
            try:
                window = await super().measure(t0_ms)
                await watch
            finally:
                watch.cancel()
                if self.attacker is not None and self.attacker.returncode is None:
                    self.attacker.kill()
                    await self.attacker.wait()
            return window

        async def watch(self, w0_ms: float) -> None:
            out = self.workdir / "badinput.json"
            if self.attack:
                env = dict(os.environ, **{TOKEN_ENV: self.token})
                env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]),
                                                                env.get("PYTHONPATH", "")) if p)
                self.attacker = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bench.badinput", "--base-url", self.base_url, "--seconds", str(opts.seconds),
                    "--json", str(out), "--start-at", str(w0_ms / 1000.0),
                    "--per-address-cap", str(self.config.max_pending_per_address),
                    "--max-pending", str(self.config.pending_connections_limit),
                    env=env, stdout=asyncio.subprocess.DEVNULL, stderr=self.log_file)
                if self.pin_load:
                    pin_tree(self.attacker.pid, self.pin_load)
            await asyncio.sleep(max(0.0, w0_ms / 1000.0 - time.monotonic()))
            pids_before = self.stack.program_pids()
            rss_before = {name: rss_kb(pid) for name, pid in pids_before.items()}
            if self.attacker is not None:
                await self.attacker.wait()
            else:
                await asyncio.sleep(max(0.0, w0_ms / 1000.0 + opts.seconds - time.monotonic()))
            await asyncio.sleep(AFTER_ATTACK_S)
            pids_after = self.stack.program_pids()
            self.memory = memory_figures(rss_before, {name: rss_kb(pid) for name, pid in pids_after.items()})
            self.restarted = sorted(name for name, pid in pids_before.items() if pids_after.get(name) != pid)
            if self.attack:
                try:
                    self.campaign = json.loads(out.read_text())
                except (OSError, ValueError) as exc:
                    self.campaign = {"error": f"the attacker wrote no report ({type(exc).__name__}; exit "
                                              f"{self.attacker.returncode})"}

    return AttackedRun()


async def bad_input_bench(opts) -> dict:
    """Both runs, the control first, and the top-level report: the control's figures plus ``bad_input``
    and ``attacked_run`` (the whole report of the run under attack)."""
    import tempfile

    from bench.report import machine_info, versions

    # as bench/run.py's _bench: SIGTERM cancels (every run's finally stops its stack), the privileges
    # reach the stack's environment
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    os.environ["VOICECORE_REALTIME_PRIORITY"] = "1" if opts.privileges == "on" else "0"
    runs = {}
    for attack in (False, True):
        with tempfile.TemporaryDirectory(prefix="voicecore-bench-badinput-") as tmp:
            run = make_attacked_run(opts, opts.calls, Path(tmp), attack)
            report = await run.run()
            log_text = run.log_path.read_text(errors="replace")
            runs[attack] = (report, run)
            report["_tracebacks"] = tracebacks_in(log_text)
            print(f"bench: {'with' if attack else 'without'} the attack: {report['calls_completed']}/{opts.calls} calls "
                  f"completed, lateness p99 {report['lateness_ms']['p99']:.2f} ms", file=sys.stderr, flush=True)
    (without, control), (attacked, run) = runs[False], runs[True]
    figures = bad_input_figures(without, attacked, run.campaign, run.memory, control.memory, run.restarted,
                                attacked.pop("_tracebacks"))
    figures["control_crashes"] = len(control.restarted) + len(without.pop("_tracebacks"))
    top = {k: v for k, v in without.items() if k != "_log_tail"}
    top["bad_input"] = figures
    top["attacked_run"] = {k: v for k, v in attacked.items() if k not in ("_log_tail", "lateness_cdf_ms")}
    top["command"] = " ".join(sys.argv)
    top["machine"] = machine_info()
    top["versions"] = versions()
    options = dataclasses.asdict(opts)
    options.pop("auth_token", None)
    top["configuration"] = {"options": options}
    top["_runs"] = [without, attacked]
    return top


def format_bad_input(figures: dict) -> str:
    lines = [f"bad input: {figures['inputs_tried']} inputs, {figures['unexpected_total']} not closed as documented, "
             f"{figures['crashes']} crashes; good calls' lateness p99 {figures['good_calls']['without']['lateness_p99_ms']:.2f}"
             f" ms without, {figures['good_calls']['with']['lateness_p99_ms']:.2f} ms with "
             f"({figures['lateness_p99_delta_ms']:+.2f} ms); gateway RSS {figures['memory']['gateway_rss_kb_before']} -> "
             f"{figures['memory']['gateway_rss_kb_after']} kB ({figures['memory']['growth_pct']:+.2f}%)"]
    width = max((len(kind) for kind in figures["by_kind"]), default=4)
    for kind, entry in figures["by_kind"].items():
        lines.append(f"  {kind:<{width}}  {entry['tried']:6d} tried  {entry['closed_as_documented']:6d} as documented")
        lines += [f"    unexpected: {example}" for example in entry["unexpected"][:2]]
    return "\n".join(lines)


def bad_input_problem(opts) -> str | None:
    if opts.target or opts.baseline or opts.find_capacity or opts.compare_store or opts.transport != "tcp":
        return ("--bad-input starts its own stack twice over loopback TCP (the attacker needs 127.0.x.y source "
                "addresses): not with --target, --baseline, --find-capacity, --compare-store or --transport unix")
    if opts.scenario not in ("steady", "bargein-storm", "model-stall", "silence", "overlap"):
        return "--bad-input runs a plain scenario (steady by default)"
    return None


def run_bad_input(opts) -> int:
    """`voicecore bench --bad-input`: print, write and save the report; exit 0 when nothing crashed, every
    input got its documented answer and every good call completed in both runs."""
    from bench.report import format_table
    from bench.run import results_path

    problem = bad_input_problem(opts)
    save_path = None
    if problem is None and opts.save:
        try:
            save_path = results_path(opts.save)
        except ValueError as exc:
            problem = str(exc)
        else:
            if save_path.exists():
                problem = f"{save_path} exists; published results are never overwritten (pick another name)"
    if problem:
        print(f"voicecore bench: {problem}", file=sys.stderr)
        return 2
    try:
        top = asyncio.run(bad_input_bench(opts))
    except (asyncio.CancelledError, KeyboardInterrupt):
        print("voicecore bench: stopped; the stack and load processes were shut down", file=sys.stderr)
        return 130
    runs = top.pop("_runs")
    print(format_table(top, runs))
    print("(first row without the attack, second with it)")
    print(format_bad_input(top["bad_input"]))
    text = json.dumps(top, indent=1) + "\n"
    for path in filter(None, (opts.json_path, save_path)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
        print(f"bench: JSON report written to {path}", file=sys.stderr)
    figures = top["bad_input"]
    ok = (figures["crashes"] == 0 and figures["unexpected_total"] == 0 and figures["inputs_tried"] > 0
          and all(run["calls_completed"] == opts.calls for run in runs))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.badinput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the gateway's public base URL (what Twilio signs)")
    parser.add_argument("--connect", default="", help="where to connect, if not the base URL (http://127.0.0.1:PORT)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", dest="json_path", default="", help="write the report here (else stdout)")
    parser.add_argument("--rate", type=float, default=150.0, help="inputs started per second at most (default 150)")
    parser.add_argument("--concurrency", type=int, default=24, help="inputs in flight at most (default 24)")
    parser.add_argument("--pool", type=int, default=150, help="hypothesis examples drawn per kind (default 150)")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--per-address-cap", type=int, default=32, help="the gateway's max_pending_per_address")
    parser.add_argument("--max-pending", type=int, default=64,
                        help="the gateway's pending-connection cap in all (max_pending_connections, default 64)")
    parser.add_argument("--start-at", type=float, default=0.0,
                        help="CLOCK_MONOTONIC seconds to start at (the pools are drawn before); 0: at once")
    parser.add_argument("--kinds", default="", help="comma-separated kinds (default: all)")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        print(f"bench.badinput: the gateway's Twilio auth token must be in ${TOKEN_ENV}", file=sys.stderr)
        return 2
    os.nice(10)  # the attack must not take the CPU the good calls are measured on
    pools = draw_pools(args.pool, args.seed, [k for k in args.kinds.split(",") if k] or None)
    print("ready", flush=True)
    if args.start_at:
        time.sleep(max(0.0, args.start_at - time.monotonic()))
    target = target_from(args.base_url, token, args.per_address_cap, args.max_pending, args.connect)
    report = asyncio.run(attack(target, args.seconds, args.rate, args.concurrency, pools, args.seed))
    text = json.dumps(report, indent=1)
    if args.json_path:
        Path(args.json_path).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
