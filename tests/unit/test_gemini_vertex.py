"""Gemini Live's credentials, sans-I/O: the URL, headers and model name built for each kind (the Gemini API
with a key, Vertex AI with an access token), the access-token refresh schedule on a fake clock, the token
shell with a fake refresh (single flight, failure, keep-fresh timing), the simulator core's Vertex model
names, and `voicecore up`'s route per vendor and credentials."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime

import pytest

from voicecore.agent.load import default_agent_dir, load_agent
from voicecore.agent.spec import AgentSpec
from voicecore.config import load_config
from voicecore.gemini import transport as gc
from voicecore.gemini.transport import VertexTokens, seconds_until
from voicecore.gemini.vertex_tokens import REFRESH_BEFORE_EXPIRY_S, RETRY_AFTER_FAILURE_S, TokenError, TokenSchedule
from voicecore.sim.gemini_core import GeminiConnection, GeminiSimConfig, SessionStore
from voicecore.sim.gemini_core import Answer
from voicecore.vendor_route import route_for

VERTEX_PATH = "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent"


# --- endpoints -----------------------------------------------------------------------------------------

def test_an_api_key_dials_the_gemini_api_with_the_key_header():
    access = gc.access("", "", {"GOOGLE_API_KEY": "g", "GEMINI_API_KEY": "AIzaSecret"})
    assert access.kind == gc.API_KEY and access.api_key == "AIzaSecret"  # GEMINI_API_KEY first, as Google's SDK reads it
    assert access.url == "wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta." \
                         "GenerativeService.BidiGenerateContent"
    target = gc.endpoint_for_access(access, {}, call_sid="CA1")
    assert target.headers == [("x-goog-api-key", "AIzaSecret"), ("X-Voicecore-Call", "CA1")] and target.provider == "gemini"
    assert access.model_name("gemini-live-2.5-flash") == "gemini-live-2.5-flash"  # setup adds models/
    assert "AIzaSecret" not in access.describe()


def test_a_vertex_project_dials_the_regional_endpoint_with_a_bearer_token():
    access = gc.access("", "ignored-key", {"GEMINI_API_KEY": "k"}, "acme-voice", "europe-west4")
    assert access.kind == gc.VERTEX  # the project setting wins over a key in the environment
    assert access.url == "wss://europe-west4-aiplatform.googleapis.com" + VERTEX_PATH
    assert access.model_name("gemini-live-2.5-flash") == \
        "projects/acme-voice/locations/europe-west4/publishers/google/models/gemini-live-2.5-flash"
    assert access.model_name("models/gemini-x") == \
        "projects/acme-voice/locations/europe-west4/publishers/google/models/gemini-x"
    assert access.model_name("projects/p/locations/l/publishers/google/models/m") == \
        "projects/p/locations/l/publishers/google/models/m"
    target = gc.endpoint_for_access(access, {}, token="ya29.t", quota_project="billing-proj")
    assert target.headers == [("Authorization", "Bearer ya29.t"), ("x-goog-user-project", "billing-proj")]
    assert target.provider == "gemini-vertex" and "ya29" not in access.describe()
    assert gc.endpoint_for_access(access, {}).headers == []  # no token: no Authorization at all


def test_the_global_location_has_no_regional_host():
    assert gc.access("", "", {}, "p", "global").url == "wss://aiplatform.googleapis.com" + VERTEX_PATH


def test_vertex_from_the_sdks_environment_variables():
    environ = {"GOOGLE_GENAI_USE_VERTEXAI": "True", "GOOGLE_CLOUD_PROJECT": "envproj",
               "GOOGLE_CLOUD_LOCATION": "us-east5"}
    access = gc.access("", "", environ, "", "us-central1")
    assert (access.kind, access.project, access.location) == (gc.VERTEX, "envproj", "us-east5")
    assert gc.access("", "", {**environ, "GOOGLE_GENAI_USE_VERTEXAI": "false"}).kind == gc.NO_CREDENTIALS


def test_realtime_url_replaces_googles_endpoint_for_either_kind():
    sim = "ws://127.0.0.1:9200" + VERTEX_PATH
    assert gc.access(sim, "", {}, "p", "us-central1").url == sim
    assert gc.access("ws://127.0.0.1:9", "k", {}).url == "ws://127.0.0.1:9"


def test_a_config_reads_the_vertex_settings_from_the_environment():
    config = load_config({"VOICECORE_GEMINI_VERTEX_PROJECT": "acme", "VOICECORE_GEMINI_VERTEX_LOCATION": "asia-south1"})
    access = gc.access_for_config(config, {})
    assert (access.kind, access.project, access.location) == (gc.VERTEX, "acme", "asia-south1")
    assert load_config({}).gemini_vertex_location == "us-central1"


def test_a_refused_credential_closes_as_auth():
    assert gc.classify_close(1008, "Request had invalid authentication credentials.").kind == "auth"
    assert gc.classify_close(1008, "Publisher model not found, or the project has no access to it: x").kind == "model"


# --- the refresh schedule ----------------------------------------------------------------------------

def test_a_token_is_refreshed_before_it_expires_and_not_handed_out_at_its_end():
    schedule = TokenSchedule()
    assert schedule.refresh_due_at_s() == 0.0 and not schedule.usable(0.0)  # none yet: at once
    schedule.refreshed("t1", 3599.0, now_s=100.0)
    assert schedule.usable(100.0) and schedule.refresh_due_at_s() == 100.0 + 3599.0 - REFRESH_BEFORE_EXPIRY_S
    assert schedule.usable(3600.0) and not schedule.usable(100.0 + 3599.0 - 10)  # too close to its end


def test_failed_refreshes_back_off_and_keep_a_token_that_is_still_good():
    schedule = TokenSchedule()
    schedule.refreshed("t1", 3599.0, now_s=0.0)
    pauses = [schedule.failed("refused", now_s=3300.0) for _ in range(len(RETRY_AFTER_FAILURE_S) + 2)]
    assert pauses == list(RETRY_AFTER_FAILURE_S) + [RETRY_AFTER_FAILURE_S[-1]] * 2
    assert schedule.refresh_due_at_s() == 3300.0 + RETRY_AFTER_FAILURE_S[-1]
    assert schedule.usable(3300.0) and schedule.last_error == "refused"
    schedule.refreshed("t2", 3599.0, now_s=3310.0)
    assert schedule.failures == 0 and schedule.refresh_due_at_s() == 3310.0 + 3599.0 - REFRESH_BEFORE_EXPIRY_S


def test_google_auths_expiry_is_read_as_utc():
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
    assert seconds_until(datetime.datetime(2026, 1, 1, 13, 0), now) == 3600.0  # naive: UTC, as google-auth keeps it
    assert seconds_until(datetime.datetime(2026, 1, 1, 12, 30, tzinfo=datetime.timezone.utc), now) == 1800.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeRefresh:
    """The blocking refresh, faked: each call hands out the next token, or raises TokenError when told to."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail_with: str | None = None

    def __call__(self, credentials: object) -> tuple[str, float]:
        self.calls += 1
        if self.fail_with:
            raise TokenError(self.fail_with)
        return f"tok{self.calls}", 3599.0


def make_tokens(clock: FakeClock, refresh: FakeRefresh) -> VertexTokens:
    return VertexTokens(load=lambda: object(), refresh=refresh, clock=clock)


def test_calls_that_ask_together_share_one_refresh():
    clock, refresh = FakeClock(), FakeRefresh()
    tokens = make_tokens(clock, refresh)

    async def scenario() -> list[str]:
        return list(await asyncio.gather(*(tokens.token() for _ in range(5))))

    try:
        assert asyncio.run(scenario()) == ["tok1"] * 5 and refresh.calls == 1
        assert tokens.current() == "tok1"
        clock.now += 3599.0 - 20  # near its end: not handed to a new connection; the next one is fetched
        assert tokens.current() == ""
        assert asyncio.run(tokens.token()) == "tok2" and refresh.calls == 2
    finally:
        tokens.close()


def test_a_failed_refresh_is_a_token_error_and_is_retried_later():
    clock, refresh = FakeClock(), FakeRefresh()
    tokens = make_tokens(clock, refresh)
    refresh.fail_with = "invalid_grant: account not found"
    try:
        with pytest.raises(TokenError, match="account not found"):
            asyncio.run(tokens.token())
        assert tokens.schedule.failures == 1 and tokens.schedule.refresh_due_at_s() == clock.now + RETRY_AFTER_FAILURE_S[0]
        refresh.fail_with = None
        assert asyncio.run(tokens.token()) == "tok2"
    finally:
        tokens.close()


def test_keep_fresh_refreshes_ahead_of_expiry_without_blocking_the_loop():
    """The background task fetches the first token at once and the next REFRESH_BEFORE_EXPIRY_S before the
    first expires; the loop keeps running (a ticker advances) while it waits."""
    clock, refresh = FakeClock(), FakeRefresh()
    tokens = make_tokens(clock, refresh)

    async def scenario() -> None:
        stop = asyncio.Event()
        keeper = asyncio.ensure_future(tokens.keep_fresh(stop))
        for _ in range(200):
            await asyncio.sleep(0.001)
            if refresh.calls == 1:
                break
        assert tokens.current() == "tok1"
        clock.now += 3599.0 - REFRESH_BEFORE_EXPIRY_S - 1  # not due yet
        stop_soon = asyncio.get_running_loop().call_later(0.05, stop.set)
        await asyncio.wait_for(keeper, 5)
        stop_soon.cancel()
        assert refresh.calls == 1
        stop.clear()
        clock.now += 2  # due: refreshed while the old token is still good
        keeper = asyncio.ensure_future(tokens.keep_fresh(stop))
        for _ in range(200):
            await asyncio.sleep(0.001)
            if refresh.calls == 2:
                break
        stop.set()
        await asyncio.wait_for(keeper, 5)

    try:
        asyncio.run(scenario())
        assert refresh.calls == 2 and tokens.current() == "tok2"
    finally:
        tokens.close()


# --- the simulator core: Vertex model names ------------------------------------------------------------

ANSWERS = (Answer("Hello.", b"\x00\x00" * 2400),)


def vertex_setup(model: str, config: GeminiSimConfig) -> GeminiConnection:
    conn = GeminiConnection(config, ANSWERS, SessionStore(), api_key=None, now_ms=0, vertex=True)
    conn.receive(f'{{"setup": {{"model": "{model}"}}}}', 0)
    return conn


def test_the_vertex_path_takes_resource_names_of_its_project_and_location():
    config = GeminiSimConfig(vertex_project="acme", vertex_location="us-central1", models=("gemini-x",))
    good = "projects/acme/locations/us-central1/publishers/google/models/gemini-x"
    assert vertex_setup(good, config).close is None  # no API key needed: the token was checked at the upgrade
    for bad in ("models/gemini-x", "gemini-x", "projects/other/locations/us-central1/publishers/google/models/gemini-x",
                "projects/acme/locations/europe-west4/publishers/google/models/gemini-x",
                "projects/acme/locations/us-central1/publishers/google/models/gemini-y"):
        close = vertex_setup(bad, config).close
        assert close is not None and close[0] == 1008 and "not found" in close[1], bad


def test_the_gemini_api_path_still_wants_a_key_and_a_models_name():
    conn = GeminiConnection(GeminiSimConfig(), ANSWERS, SessionStore(), api_key=None, now_ms=0)
    conn.receive('{"setup": {"model": "models/gemini-x"}}', 0)
    assert conn.close is not None and "API key not valid" in conn.close[1]


# --- `voicecore up`: where the agent goes ---------------------------------------------------------------

def agent(model: str = "", vendor: str = "") -> AgentSpec:
    return dataclasses.replace(load_agent(default_agent_dir()), name="desk", model=model, model_vendor=vendor)


def test_a_gemini_agent_with_only_a_gemini_key_talks_to_google():
    config = dataclasses.replace(load_config({}), model="gemini-live-2.5-flash")
    route = route_for(config, agent(vendor="gemini"), {"GEMINI_API_KEY": "k"})
    assert (route.vendor, route.simulated, route.refused, route.missing) == ("gemini", False, False, "")
    assert "generativelanguage.googleapis.com" in route.line() and "(API key)" in route.line()


def test_a_gemini_agent_on_vertex_names_project_and_location():
    config = dataclasses.replace(load_config({}), model="gemini-live-2.5-flash", gemini_vertex_project="acme")
    route = route_for(config, agent(), {})
    assert not route.simulated and not route.refused and "Vertex AI" in route.line() and "project acme" in route.line()
    assert route.model.startswith("projects/acme/locations/us-central1/")


def test_a_gemini_agent_without_credentials_is_refused_and_told_what_is_missing():
    config = dataclasses.replace(load_config({}), model="gemini-live-2.5-flash")
    route = route_for(config, agent(), {})
    assert route.refused and "GEMINI_API_KEY" in route.missing and "gemini_vertex_project" in route.missing


def test_an_openai_agent_without_an_openai_key_keeps_the_builtin_simulator():
    route = route_for(load_config({}), agent(), {"GEMINI_API_KEY": "k"})
    assert (route.vendor, route.simulated, route.refused) == ("openai", True, False)
    assert "built-in model simulator" in route.line() and "realtime_api_key" in route.missing
    keyed = route_for(load_config({"VOICECORE_REALTIME_API_KEY": "sk"}), agent(), {})
    assert not keyed.simulated and "api.openai.com" in keyed.line() and not keyed.missing


def test_a_call_waits_for_a_slow_token_endpoint_no_longer_than_its_connect_timeout():
    import threading

    release = threading.Event()
    clock = FakeClock()

    def slow_refresh(credentials: object) -> tuple[str, float]:
        release.wait(5)
        return "late", 3599.0

    tokens = VertexTokens(load=lambda: object(), refresh=slow_refresh, clock=clock)

    async def scenario() -> str:
        with pytest.raises(TokenError, match="within 0.05 s"):
            await tokens.token(timeout_s=0.05)
        release.set()  # the refresh went on: the next caller gets its token
        return await tokens.token(timeout_s=5)

    try:
        assert asyncio.run(scenario()) == "late"
    finally:
        release.set()
        tokens.close()
