"""The re-attach step in a fleet (workers/gateway/reattach.py): two nodes' gateways with runtime directories of
their own sharing one PostgreSQL (pgserver). A re-attach request may reach either node: a token used on one is
refused on the other, a call whose stream ended normally on one is hung up on the other, and a store that is
down leaves each node to its own ledger (fail open)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest

from voicecore import reattach as ra
from voicecore.config import load_config
from workers.gateway.reattach import ReattachService
from workers.gateway.tokens import TokenService

CALL = "CA" + "ab" * 16
OTHER_CALL = "CA" + "cd" * 16


def node(name: str, runtime_dir: Path, database_url: str = "") -> tuple[TokenService, ReattachService]:
    config = load_config({"VOICECORE_TWILIO_AUTH_TOKEN": "fleet-auth-token", "VOICECORE_NODE_ID": name,
                          "VOICECORE_DATABASE_URL": database_url, "VOICECORE_TOKEN_STORE_TIMEOUT_MS": "3000"})
    tokens = TokenService(config)
    return tokens, ReattachService(config, runtime_dir, tokens.ledger, tokens.shared)


def flush(tokens: TokenService) -> None:
    """Wait until the ledger's thread has done what it was handed (a normal end is written without waiting)."""
    assert tokens.ledger is not None
    tokens.ledger.thread.submit(lambda: None).result(timeout=10)


def decide(service: ReattachService, token: str, call: str = CALL) -> ra.Decision:
    return asyncio.run(service.decide(token, call, draining=False, call_completed=False))


@pytest.fixture(scope="module")
def postgres_url():
    pgserver = pytest.importorskip("pgserver")
    with tempfile.TemporaryDirectory(prefix="voicecore-pg-") as tmp:
        server = pgserver.get_server(Path(tmp) / "pgdata", cleanup_mode="stop")
        try:
            yield server.get_uri()
        finally:
            server.cleanup()


@pytest.mark.integration
def test_a_token_used_on_one_node_is_refused_on_another(postgres_url, tmp_path):
    tokens_a, a = node("node-a", tmp_path / "a", postgres_url)
    tokens_b, b = node("node-b", tmp_path / "b", postgres_url)
    try:
        token = a.issue(CALL)
        assert decide(b, token).action == ra.ATTACH  # A's gateway died: the request reached B
        refused = decide(a, token)  # the same request replayed at A, whose own ledger never saw it
        assert refused.action == ra.REFUSE and refused.reason == "re-attach token reused"
        assert a.counts["reattach_refused_reused_in_fleet"] == 1 and b.counts["calls_reattached"] == 1
        assert decide(b, token).action == ra.REFUSE  # and at B, by its own ledger
    finally:
        tokens_a.close()
        tokens_b.close()


@pytest.mark.integration
def test_a_call_that_ended_normally_on_one_node_is_hung_up_on_another(postgres_url, tmp_path):
    tokens_a, a = node("node-a", tmp_path / "a", postgres_url)
    tokens_b, b = node("node-b", tmp_path / "b", postgres_url)
    try:
        a.stream_ended(CALL, "ended by the agent")  # the agent said goodbye: a normal end
        a.stream_ended(OTHER_CALL, "connection lost")  # the carrier lost this one: not an end
        flush(tokens_a)
        ended = decide(b, a.issue(CALL))
        assert ended.action == ra.HANGUP and ended.reason == "its stream ended normally"
        assert b.counts["reattach_ended_on_another_node"] == 1
        assert decide(b, a.issue(OTHER_CALL), OTHER_CALL).action == ra.ATTACH
    finally:
        tokens_a.close()
        tokens_b.close()


def test_without_a_fleet_store_each_node_decides_alone(tmp_path):
    tokens_a, a = node("node-a", tmp_path / "a")
    tokens_b, b = node("node-b", tmp_path / "b")
    assert a.fleet is None and b.fleet is None
    token = a.issue(CALL)
    assert decide(b, token).action == ra.ATTACH
    assert decide(a, token).action == ra.ATTACH  # nothing shared: the single use is per node
    a.stream_ended(OTHER_CALL, "ended by the agent")
    assert decide(a, a.issue(OTHER_CALL), OTHER_CALL).action == ra.HANGUP
    assert decide(b, a.issue(OTHER_CALL), OTHER_CALL).action == ra.ATTACH


def test_a_fleet_store_that_is_down_leaves_the_node_to_its_own_ledger(tmp_path):
    # nothing listens on port 1: refused at once; the request is decided on this node's ledger (fail open)
    tokens, service = node("node-a", tmp_path / "a", "postgresql://voicecore@127.0.0.1:1/calls?connect_timeout=1")
    try:
        token = service.issue(CALL)
        assert decide(service, token).action == ra.ATTACH
        assert decide(service, token).action == ra.REFUSE  # the node's own ledger still holds the single use
        assert tokens.shared.counts["error"] + tokens.shared.counts["timeout"] == 1
    finally:
        tokens.close()
