"""The gateway's token service (workers/gateway/tokens.py): local and signed tokens issued and redeemed, and
the fleet-wide check through the store: a replay refused across two gateways sharing a PostgreSQL (pgserver),
and a store that is down or slow passed over within the bound (fail open), then not asked for a while."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path

import pytest

from voicecore.config import load_config
from voicecore.stream_tokens import SHARED_INSERTED
from workers.gateway.tokens import TokenService

CALL_SID = "CA" + "ab" * 16


def config(**settings: str):
    return load_config({"VOICECORE_TWILIO_AUTH_TOKEN": "fleet-auth-token",
                        **{f"VOICECORE_{k.upper()}": v for k, v in settings.items()}})


def test_local_tokens_are_the_old_ones_and_only_their_issuer_knows_them():
    a, b = TokenService(config(stream_tokens="local", node_id="a")), TokenService(config(stream_tokens="local", node_id="b"))
    token = a.issue(CALL_SID)
    assert len(token) == 32  # secrets.token_urlsafe(24), as before
    assert b.redeem(token).reason == "unknown"
    check = a.redeem(token)
    assert check.ok and check.call_sid == CALL_SID and not a.needs_shared_check(check)
    assert a.redeem(token).reason == "reused"
    assert a.metrics()["stream_tokens_signed"] == 0 and a.metrics()["tokens_redeemed"] == 1


def test_signed_tokens_work_on_any_node_sharing_the_auth_token_once_each():
    a, b = TokenService(config(node_id="a")), TokenService(config(node_id="b"))
    other_fleet = TokenService(load_config({"VOICECORE_TWILIO_AUTH_TOKEN": "another-account", "VOICECORE_NODE_ID": "c"}))
    token = a.issue(CALL_SID)
    assert other_fleet.redeem(token).reason == "forged"
    check = b.redeem(token)
    assert check.ok and check.issuer == "a" and not b.needs_shared_check(check)  # no shared store configured
    assert b.redeem(token).reason == "reused"
    metrics = b.metrics()
    assert metrics["tokens_redeemed_from_other_nodes"] == 1 and metrics["tokens_refused"] == 1
    secret = TokenService(config(node_id="d", token_secret="a-fleet-secret-of-32-characters!"))
    assert TokenService(config(node_id="e", token_secret="a-fleet-secret-of-32-characters!")).redeem(
        secret.issue(CALL_SID)).ok


def test_a_sqlite_store_is_not_a_fleet_store(tmp_path):
    service = TokenService(config(node_id="a", database_url=f"sqlite:///{tmp_path}/calls.db"))
    assert service.ledger is None


def test_a_store_that_is_down_is_passed_over_within_the_bound_fail_open():
    # nothing listens on port 1: the connection is refused at once
    service = TokenService(config(node_id="a", database_url="postgresql://voicecore@127.0.0.1:1/calls?connect_timeout=1"))
    try:
        check = service.redeem(service.issue(CALL_SID))
        assert check.ok and service.needs_shared_check(check)
        started = time.monotonic()
        verdict = asyncio.run(service.confirm(check))
        # within the bound (libpq alone would wait as long as TCP does, minutes); the margin is for a loaded
        # machine's scheduling, not the store's
        assert time.monotonic() - started < service.timeout_s + 2.0
        assert verdict.accept and "accepted on this node's check alone" in verdict.reason
        assert not service.needs_shared_check(service.redeem(service.issue(CALL_SID)))  # passed over for a while
        assert service.metrics()["token_store_skipped"] == 1
        assert service.metrics()["token_store_error"] + service.metrics()["token_store_timeout"] == 1
    finally:
        service.close()


def test_a_slow_store_is_passed_over_at_the_timeout():
    service = TokenService(dataclasses.replace(config(node_id="a"), token_store_timeout_ms=50))
    service.ledger = type("SlowLedger", (), {"claim": None})()

    async def slow(check, timeout_s):
        try:
            await asyncio.wait_for(asyncio.sleep(5), timeout_s)
        except TimeoutError:
            return "timeout"
        return SHARED_INSERTED

    service.ledger.claim = slow
    check = service.redeem(service.issue(CALL_SID))
    started = time.monotonic()
    verdict = asyncio.run(service.confirm(check))
    assert time.monotonic() - started < 0.5 and verdict.accept and service.metrics()["token_store_timeout"] == 1


@pytest.mark.integration
def test_a_token_redeemed_on_one_gateway_is_refused_on_another_sharing_postgresql():
    pgserver = pytest.importorskip("pgserver")
    with tempfile.TemporaryDirectory(prefix="voicecore-pg-") as tmp:
        server = pgserver.get_server(Path(tmp) / "pgdata", cleanup_mode="stop")
        try:
            url = server.get_uri()
            a = TokenService(config(node_id="a", database_url=url, token_store_timeout_ms="2000"))
            b = TokenService(config(node_id="b", database_url=url, token_store_timeout_ms="2000"))
            try:
                token = a.issue(CALL_SID)

                async def both():
                    on_b = b.redeem(token)
                    first = await b.confirm(on_b)
                    on_a = a.redeem(token)  # A never saw it: its own cache lets it through...
                    assert on_a.ok and a.needs_shared_check(on_a)
                    second = await a.confirm(on_a)  # ...the store does not
                    return first, second

                first, second = asyncio.run(both())
                assert first.accept and first.reason is None
                assert not second.accept and second.reason == "reused"
                assert a.metrics()["tokens_refused_reused_in_fleet"] == 1 and b.metrics()["token_store_inserted"] == 1
            finally:
                a.close()
                b.close()
        finally:
            server.cleanup()
