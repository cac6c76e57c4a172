"""A call re-attached on another node after its gateway died goes on where it stood (docs/how-to/drain.md).

Two nodes share one PostgreSQL and answer at one public URL (the load balancer of test_integration_two_nodes).
A call lands on node A (its answer names A's own stream URL); the caller asks a question and hears the answer.
Then node A's gateway is killed and the balancer takes A out of its rotation (as its health check would), so the
carrier's re-attach request reaches node B. B's gateway answers a new stream for the same call; B's model worker
has neither the driver nor the record of a call A served, and restores it from the state A's worker wrote to the
store as the call went: B's new model session is given the conversation so far and the caller is not greeted
again. The call runs on to the caller's own end, its second question answered on B.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from stacks import start_stack
from test_integration_two_nodes import AUTH_TOKEN, LoadBalancer, postgres_url  # noqa: F401 (a fixture)

from voicecore.demo import free_port
from voicecore.sim.audio_clips import load_clip
from voicecore.sim.carrier import CallScript, place_call
from voicecore.store import CallStore

pytestmark = pytest.mark.integration

# The greeting, a question at 5.5 s and its answer, the gateway killed at 10 s, a second question after.
KILL_AT_S = 10.0
SCRIPT = CallScript(duration_ms=19_000, utterances=((5500, load_clip("caller_basic_price")),
                                                    (13_500, load_clip("caller_hours"))))


def given_back(session) -> list[tuple[str, str]]:
    """The message items a simulated model session was given by the client (role, text)."""
    out = []
    for item in session._items.values():
        rendered = item.rendered
        if rendered.get("type") == "message":
            text = " ".join(part.get("text") or part.get("transcript") or "" for part in rendered.get("content", []))
            out.append((rendered["role"], text))
    return out


def test_a_call_re_attached_on_another_node_is_restored_from_the_store(postgres_url):  # noqa: F811
    lb_port, a_port, b_port = free_port(), free_port(), free_port()
    lb_url = f"http://127.0.0.1:{lb_port}"
    common = dict(public_url=lb_url, twilio_auth_token=AUTH_TOKEN, database_url=postgres_url, standby_workers=False,
                  call_control="turns", max_pending_per_address=0)
    node_a = node_b = None
    try:
        node_a = start_stack(listen=f"127.0.0.1:{a_port}", node_id="node-a",
                             node_stream_url=f"http://127.0.0.1:{a_port}", **common)
        node_b = start_stack(listen=f"127.0.0.1:{b_port}", node_id="node-b",
                             node_stream_url=f"http://127.0.0.1:{b_port}", **common)
        a_listen, b_listen = node_a.config.listen, node_b.config.listen
        call_sid = "CA" + os.urandom(16).hex()

        async def scenario():
            balancer = LoadBalancer([a_listen, b_listen])
            await balancer.start(lb_port)
            try:
                async with node_a.model_sim() as sim_a, node_b.model_sim() as sim_b:
                    call = asyncio.create_task(place_call(lb_url, AUTH_TOKEN, SCRIPT, call_sid=call_sid))
                    await asyncio.sleep(KILL_AT_S)
                    assert sim_a.by_call(call_sid), ("the call did not land on node A", node_a.log_tail())
                    # A leaves the rotation as its failing health check would take it out, then its gateway dies
                    if balancer.checker is not None:
                        balancer.checker.cancel()
                    balancer.healthy[a_listen] = False
                    os.kill(node_a.stack.program_pids()["gateway"], signal.SIGKILL)
                    result = await call
                    return result, sim_a.by_call(call_sid), sim_b.by_call(call_sid)
            finally:
                await balancer.close()

        result, on_a, on_b = asyncio.run(scenario())
        log_b = node_b.log_path.read_text(errors="replace")
        context = f"{result.closed_by}: {'; '.join(result.errors)}\n--- A\n{node_a.log_tail()}\n--- B\n{log_b[-6000:]}"
        assert result.closed_by == "carrier" and not result.errors, context
        assert len(result.core.metrics.reattaches) == 1, context
        lost_at, attached_at = result.core.metrics.reattaches[0]
        assert f"call {call_sid}: its stream ended unexpectedly: re-attached" in log_b, context  # B answered it
        assert f"call {call_sid}: re-attached here; its state restored from the store (written by node-a" in log_b, context
        # B's model session was given the conversation A's had: the caller's question and what they heard
        assert on_a and on_b, context
        first_on_b = min(on_b, key=lambda s: s.record.connected_ms)
        given = given_back(first_on_b)
        assert any(role == "user" and text.strip() for role, text in given), (given, context)
        assert any(role == "assistant" and text.strip() for role, text in given), (given, context)
        # ... and was never asked to greet the caller again
        assert not any((r.metadata or {}).get("vc_prompt") == "greeting" for r in first_on_b.record.responses), context
        # the caller heard B's answers over the new stream, and nothing of the old stream's
        assert any(frame.arrival_ms > attached_at + 1000 for frame in result.core.frames), context
        assert result.statistics.stale_frames == 0, context
        # the call's normal end removed its state: nothing is left for a later re-attach to restore
        with CallStore.open(postgres_url) as store:
            assert store.call_state(call_sid) is None
    finally:
        for node in (node_a, node_b):
            if node is not None:
                node.stop()
