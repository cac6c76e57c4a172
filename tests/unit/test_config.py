"""Configuration: defaults, TOML file, environment overrides, and clear errors for bad values."""

import pytest

from voicecore.config import ConfigError, load_config


def test_defaults():
    config = load_config({})
    assert config.listen == "127.0.0.1:8080"
    assert config.uses_simulator
    assert config.model_url.startswith("ws://127.0.0.1:")


def test_toml_then_environment(tmp_path):
    path = tmp_path / "voicecore.toml"
    path.write_text('[voicecore]\nlisten = "127.0.0.1:9000"\nmax_calls = 10\nmodel = "gpt-realtime-mini"\n')
    config = load_config({"VOICECORE_MAX_CALLS": "20", "VOICECORE_CONFIG": str(path)})
    assert config.listen == "127.0.0.1:9000"
    assert config.max_calls == 20  # the environment wins over the file
    assert config.model == "gpt-realtime-mini"


def test_vendor_key_means_no_simulator():
    config = load_config({"VOICECORE_REALTIME_API_KEY": "sk-test"})
    assert not config.uses_simulator
    assert config.model_url == "wss://api.openai.com/v1/realtime"


@pytest.mark.parametrize(
    "env, problem",
    [
        ({"VOICECORE_LISTEN": "8080"}, "listen"),
        ({"VOICECORE_MAX_CALLS": "many"}, "integer"),
        ({"VOICECORE_MAX_CALLS": "0"}, "max_calls"),
        ({"VOICECORE_REALTIME_NAMING": "v2"}, "realtime_naming"),
        ({"VOICECORE_LEAD_MS": "5"}, "lead_ms"),
    ],
)
def test_bad_values_name_the_setting(env, problem):
    with pytest.raises(ConfigError, match=problem):
        load_config(env)


def test_plivos_backlog_bound_is_off_or_above_what_a_steady_stream_leaves_unconfirmed():
    assert load_config({}).plivo_max_unplayed_ms == 400
    assert load_config({"VOICECORE_PLIVO_MAX_UNPLAYED_MS": "0"}).plivo_max_unplayed_ms == 0  # the lead by time alone
    assert load_config({"VOICECORE_PLIVO_MAX_UNPLAYED_MS": "220"}).plivo_max_unplayed_ms == 220  # 80 + 20 + 100 + 20
    for env in ({"VOICECORE_PLIVO_MAX_UNPLAYED_MS": "200"}, {"VOICECORE_PLIVO_MAX_UNPLAYED_MS": "-20"},
                {"VOICECORE_PLIVO_MAX_UNPLAYED_MS": "400", "VOICECORE_LEAD_MS": "300"},
                {"VOICECORE_PLIVO_MAX_UNPLAYED_MS": "60020"}):
        with pytest.raises(ConfigError, match="plivo_max_unplayed_ms"):
            load_config(env)


def test_listen_on_a_unix_socket_needs_public_url():
    config = load_config({"VOICECORE_LISTEN": "unix:/run/voicecore/gateway.sock",
                          "VOICECORE_PUBLIC_URL": "https://voice.example.com"})
    assert config.listen_unix_path == "/run/voicecore/gateway.sock"
    assert config.base_url == "https://voice.example.com"
    assert load_config({}).listen_unix_path is None
    with pytest.raises(ConfigError, match="public_url: required with listen = unix:PATH"):
        load_config({"VOICECORE_LISTEN": "unix:/run/voicecore/gateway.sock"})


@pytest.mark.parametrize("listen, problem", [
    ("unix:gateway.sock", "unix:/absolute/path"),
    ("unix:/" + "a" * 107, "at most 107 bytes"),
    ("unix:", "unix:/absolute/path"),
])
def test_bad_unix_socket_paths_are_refused(listen, problem):
    with pytest.raises(ConfigError, match=problem):
        load_config({"VOICECORE_LISTEN": listen, "VOICECORE_PUBLIC_URL": "https://voice.example.com"})


def test_unknown_toml_key(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("lisen = 1\n")
    with pytest.raises(ConfigError, match="unknown setting 'lisen'"):
        load_config({}, path)


@pytest.mark.parametrize("raw, value", [("true", True), ("False", False), ("0", False), ("on", True), ("no", False)])
def test_record_caller_audio_is_a_boolean(raw, value):
    config = load_config({"VOICECORE_RECORD_CALLER_AUDIO": raw})
    assert config.record_caller_audio is value
    assert load_config(config.as_env()).record_caller_audio is value


def test_a_boolean_setting_refuses_other_words():
    with pytest.raises(ConfigError, match="RECORD_CALLER_AUDIO: expected true or false"):
        load_config({"VOICECORE_RECORD_CALLER_AUDIO": "sometimes"})


def test_builtin_simulator_switches(tmp_path):
    config = load_config({})
    assert (config.sim_late_deltas, config.sim_overlap_probability) == (0, 0.0)
    env = load_config({"VOICECORE_SIM_OVERLAP_PROBABILITY": "0.25", "VOICECORE_SIM_LATE_DELTAS": "2"})
    assert (env.sim_late_deltas, env.sim_overlap_probability) == (2, 0.25)
    assert env.as_env()["VOICECORE_SIM_OVERLAP_PROBABILITY"] == "0.25"  # what supervisord hands the simulator
    path = tmp_path / "voicecore.toml"
    path.write_text("sim_overlap_probability = 1\n")
    assert load_config({}, path).sim_overlap_probability == 1.0
    for raw, problem in (("1.5", "sim_overlap_probability"), ("-0.1", "sim_overlap_probability"), ("often", "number"),
                         ("nan", "finite")):
        with pytest.raises(ConfigError, match=problem):
            load_config({"VOICECORE_SIM_OVERLAP_PROBABILITY": raw})
    with pytest.raises(ConfigError, match="sim_late_deltas"):
        load_config({"VOICECORE_SIM_LATE_DELTAS": "4"})


CALL_SID = "CA" + "0123456789abcdef" * 2


@pytest.mark.parametrize("env, sent", [
    ({"VOICECORE_REALTIME_API_KEY": "sk-x"}, False),  # a vendor, by default: nothing that identifies the call
    ({"VOICECORE_REALTIME_API_KEY": "sk-x", "VOICECORE_SEND_CALL_ID_TO_VENDOR": "true"}, True),
    ({"VOICECORE_REALTIME_URL": "wss://proxy.example/v1/realtime"}, False),  # keyless, not on this host
    ({"VOICECORE_REALTIME_URL": "wss://proxy.example/v1/realtime", "VOICECORE_SEND_CALL_ID_TO_VENDOR": "on"}, True),
    ({"VOICECORE_REALTIME_URL": "ws://127.0.0.1:9100/v1/realtime", "VOICECORE_REALTIME_API_KEY": "sk-x"}, False),
    ({}, True),  # no vendor: the built-in simulator voicecore up starts
    ({"VOICECORE_REALTIME_URL": "ws://127.0.0.1:9555/v1/realtime"}, False),  # a local proxy may add a vendor's key
    ({"VOICECORE_REALTIME_URL": "ws://127.0.0.1:9555/v1/realtime", "VOICECORE_SEND_CALL_ID_TO_VENDOR": "1"}, True),
])
def test_the_call_id_goes_to_the_model_only_when_configured_or_to_the_built_in_simulator(env, sent):
    from voicecore.realtime.events import RealtimeUrl
    from workers.model.main import call_id_for_model

    config = load_config(env)
    assert config.send_call_id_to_vendor is ("VOICECORE_SEND_CALL_ID_TO_VENDOR" in env)
    assert call_id_for_model(config, CALL_SID) == (CALL_SID if sent else None)
    # what the model worker's CallSession.run builds from it
    headers = RealtimeUrl(config.model, config.realtime_naming, config.model_url).headers(
        config.realtime_api_key or "none", call_sid=call_id_for_model(config, CALL_SID))
    assert any(CALL_SID in value for _, value in headers) is sent


def test_send_call_id_to_vendor_is_off_by_default_and_a_boolean():
    assert load_config({}).send_call_id_to_vendor is False
    assert load_config({"VOICECORE_SEND_CALL_ID_TO_VENDOR": "1"}).send_call_id_to_vendor is True
    assert load_config({}).as_env()["VOICECORE_SEND_CALL_ID_TO_VENDOR"] == "false"
    with pytest.raises(ConfigError, match="SEND_CALL_ID_TO_VENDOR: expected true or false"):
        load_config({"VOICECORE_SEND_CALL_ID_TO_VENDOR": "maybe"})


def test_the_retired_beta_naming_is_refused_with_the_vendors_retirement():
    with pytest.raises(ConfigError, match="retired the beta Realtime interface in May 2026.*beta_api_shape_disabled"):
        load_config({"VOICECORE_REALTIME_NAMING": "beta"})
    assert load_config({}).realtime_naming == "ga"


def test_the_provider_is_named_or_told_by_the_urls_host():
    assert load_config({}).model_provider == "openai"
    azure = load_config({"VOICECORE_REALTIME_URL": "wss://acme.openai.azure.com/openai/v1/realtime?api-version=2025-08-28",
                         "VOICECORE_REALTIME_API_KEY": "k"})
    assert azure.realtime_provider == "auto" and azure.model_provider == "azure"
    forced = load_config({"VOICECORE_REALTIME_URL": "wss://gw.corp/openai/v1/realtime", "VOICECORE_REALTIME_PROVIDER": "azure"})
    assert forced.model_provider == "azure"
    with pytest.raises(ConfigError, match="realtime_provider: expected auto, openai or azure"):
        load_config({"VOICECORE_REALTIME_PROVIDER": "gemini"})
    with pytest.raises(ConfigError, match="realtime_provider: azure needs realtime_url"):
        load_config({"VOICECORE_REALTIME_PROVIDER": "azure"})
    with pytest.raises(ConfigError, match="realtime_url: expected a ws:// or wss:// URL"):
        load_config({"VOICECORE_REALTIME_URL": "https://api.openai.com/v1/realtime"})


def test_the_session_limit_is_bounded():
    assert load_config({}).realtime_session_limit_s == 3600
    with pytest.raises(ConfigError, match="realtime_session_limit_s: expected 60..86400"):
        load_config({"VOICECORE_REALTIME_SESSION_LIMIT_S": "30"})
