"""The runtime's fallback lines in the agent's voice (voicecore/fallback/lines.py, render.py): WAV files the
agent names (any rate and width, resampled with soxr), lines rendered once by the vendor's speech endpoint
(the model simulator's, over real HTTP) and kept on disk, the shipped clips as the last resort; the agent's
row of the pacer's table and what the pacer plays from it."""

from __future__ import annotations

import asyncio
import wave
from pathlib import Path

import numpy as np
import pytest

from voicecore.agent.load import AgentError, load_agent
from voicecore.fallback import APOLOGY_HANGUP, HOLD, HOLD_MAX_MS, KINDS, LANGUAGES, clip_number, load_clips
from voicecore.fallback.lines import (
    AGENT_ROW,
    LineAudioError,
    agent_clip_number,
    agent_lines,
    cache_file,
    line_texts,
    speech_url,
    table_with_agent_lines,
    wav_to_line,
)
from voicecore.fallback.render import render_agent_lines
from voicecore.g711 import ulaw_to_linear
from voicecore.sim.model import SimConfig
from voicecore.sim.model_server import serve_model_sim

KEY = "sk-proj-lines000000000"


def tone_wav(path: Path, seconds: float, rate: int = 16_000, width: int = 2, channels: int = 1,
             lead_silence_s: float = 0.2) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.5 * np.sin(2 * np.pi * 440 * t)
    signal = np.concatenate([np.zeros(int(lead_silence_s * rate)), tone, np.zeros(int(0.2 * rate))])
    if width == 1:
        data = (signal * 127 + 128).astype(np.uint8).tobytes()
    elif width == 2:
        data = (signal * 32767).astype("<i2").tobytes()
    elif width == 3:
        ints = (signal * (2**23 - 1)).astype("<i4")
        data = b"".join(int(v).to_bytes(4, "little", signed=True)[:3] for v in ints)
    else:
        data = (signal * (2**31 - 1)).astype("<i4").tobytes()
    if channels == 2:
        frame = width
        data = b"".join(data[i:i + frame] * 2 for i in range(0, len(data), frame))
    with wave.open(str(path), "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(data)
    return path


@pytest.mark.parametrize("rate,width,channels", [(16_000, 2, 1), (44_100, 3, 1), (48_000, 4, 2), (8_000, 1, 1),
                                                 (22_050, 2, 2)])
def test_a_wav_of_any_rate_and_width_becomes_an_8_khz_line_with_its_silence_trimmed(tmp_path, rate, width, channels):
    line = wav_to_line(tone_wav(tmp_path / "l.wav", 0.6, rate, width, channels))
    assert abs(len(line) - 0.6 * 8000) <= 0.07 * 8000  # the tone, 30 ms of silence kept each side
    samples = ulaw_to_linear(line).astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples))
    peak_hz = np.argmax(spectrum) * 8000 / len(samples)
    assert abs(peak_hz - 440) < 10  # resampled, not sped up or slowed down
    assert np.sqrt(np.mean(samples ** 2)) > 5000


def test_what_is_not_a_usable_wav_is_refused(tmp_path):
    (tmp_path / "x.wav").write_bytes(b"RIFF....not a wav")
    with pytest.raises(LineAudioError, match="not a PCM WAV"):
        wav_to_line(tmp_path / "x.wav")
    with pytest.raises(LineAudioError, match="silent"):
        wav_to_line(tone_wav(tmp_path / "s.wav", 0.0))


def agent_dir(tmp_path: Path, lines: str = "", **toml: str) -> Path:
    directory = tmp_path / "agent"
    directory.mkdir(exist_ok=True)
    extra = "".join(f'{key} = "{value}"\n' for key, value in toml.items())
    (directory / "agent.toml").write_text(f'name = "ada"\ninstructions = "You are Ada."\n{extra}{lines}')
    return directory


def test_an_agent_names_its_lines_as_wav_files_and_they_are_checked(tmp_path):
    directory = agent_dir(tmp_path, '[lines]\nhold = "Ett ögonblick."\n[lines.audio]\nhold = "audio/hold.wav"\n'
                                    'apology_hangup = "audio/bye.wav"\n')
    (directory / "audio").mkdir()
    tone_wav(directory / "audio" / "hold.wav", 0.7)
    tone_wav(directory / "audio" / "bye.wav", 3.0, rate=24_000)
    agent = load_agent(directory)
    assert set(agent.line_audio) == {"hold", "apology_hangup"} and agent.lines["hold"] == "Ett ögonblick."
    assert "line_audio" not in agent.to_dict()  # files of this machine, not part of a record
    tone_wav(directory / "audio" / "hold.wav", 1.5)
    with pytest.raises(AgentError) as exc:
        load_agent(directory)
    assert any("a hold line must fit in 1000 ms" in str(problem) for problem in exc.value.problems), exc.value.problems
    (directory / "audio" / "hold.wav").unlink()
    with pytest.raises(AgentError) as exc:
        load_agent(directory)
    assert any("does not exist" in str(problem) for problem in exc.value.problems)


def test_each_line_comes_from_the_agents_wav_else_the_rendered_cache_else_the_shipped_clip(tmp_path):
    directory = agent_dir(tmp_path, '[lines.audio]\napology_transfer = "t.wav"\n', voice="marin")
    tone_wav(directory / "t.wav", 2.0)
    agent = load_agent(directory)
    cache = tmp_path / "cache"
    url = "wss://api.openai.com/v1/realtime"
    rendered = bytes([0x10, 0x90]) * 2000  # 500 ms, loud
    path = cache_file(cache, speech_url(url), "gpt-4o-mini-tts", "marin", line_texts(agent.lines)["hold"])
    path.parent.mkdir(parents=True)
    path.write_bytes(rendered)
    lines = agent_lines(agent, url, "gpt-4o-mini-tts", str(cache), {})
    assert lines["apology_transfer"][1].startswith("wav:") and lines["hold"] == (rendered, "rendered")
    shipped = load_clips()
    number = clip_number("en", APOLOGY_HANGUP)
    assert lines["apology_hangup"] == (shipped.frames[number, : shipped.frame_counts[number]].tobytes(), "shipped:en")
    # no speech model: no rendering is looked for
    assert agent_lines(agent, url, "", str(cache), {})["hold"][1] == "shipped:en"


def test_an_agent_in_a_language_without_shipped_lines_gets_english_until_rendered(tmp_path):
    directory = agent_dir(tmp_path)
    (directory / "agent.toml").write_text('name = "ada"\ninstructions = "Du bist Ada."\nlanguages = ["de"]\n')
    lines = agent_lines(load_agent(directory), "wss://api.openai.com/v1/realtime", "gpt-4o-mini-tts",
                        str(tmp_path / "empty"), {})
    assert {src for _, src in lines.values()} == {"shipped:en"}
    directory_sv = tmp_path / "sv"
    directory_sv.mkdir()
    (directory_sv / "agent.toml").write_text('name = "ada"\ninstructions = "Du är Ada."\nlanguages = ["sv-SE"]\n')
    lines = agent_lines(load_agent(directory_sv), "wss://api.openai.com/v1/realtime", "", "", {})
    assert {src for _, src in lines.values()} == {"shipped:sv"}


def test_the_agents_row_follows_the_shipped_rows_in_the_pacers_table():
    shipped = load_clips()
    lines = {kind: (bytes([0x20 + i]) * (800 * (i + 1)), f"test:{kind}") for i, kind in enumerate(KINDS)}
    table = table_with_agent_lines(lines, shipped)
    assert AGENT_ROW == len(LANGUAGES) and table.frames.shape[0] == shipped.frames.shape[0] + len(KINDS)
    for i, kind in enumerate(KINDS):
        number = agent_clip_number(i)
        assert table.frame_counts[number] == -(-len(lines[kind][0]) // 160)
        assert table.frames[number, 0, 0] == 0x20 + i and table.texts[number] == f"test:{kind}"
    assert (table.frames[: shipped.frames.shape[0], : shipped.frames.shape[1]] == shipped.frames).all()
    assert agent_clip_number(HOLD) == 6


def test_speech_urls_sit_beside_the_realtime_ones():
    assert speech_url("wss://api.openai.com/v1/realtime") == "https://api.openai.com/v1/audio/speech"
    assert speech_url("wss://acme.openai.azure.com/openai/v1/realtime?api-version=2025-08-28&model=rt") == \
        "https://acme.openai.azure.com/openai/v1/audio/speech?api-version=2025-08-28"
    assert speech_url("ws://127.0.0.1:9100/v1/realtime") == "http://127.0.0.1:9100/v1/audio/speech"


def render_with_sim(tmp_path: Path, key: str = KEY, hold: str = "One moment, please.", azure: bool = False,
                    skip: frozenset[str] = frozenset(), times: int = 1):
    """Render a German agent's lines ``times`` times against one simulator; (sim, each run's outcome)."""
    async def main():
        sim, port = await serve_model_sim(config=SimConfig(api_keys=(KEY,)))
        try:
            path = "/openai/v1/realtime?api-version=2025-08-28" if azure else "/v1/realtime"
            lines = {"hold": hold, "apology": "Entschuldigung, wir haben technische Probleme.",
                     "goodbye": "Auf Wiederhören.", "transfer": "Ich verbinde Sie mit einem Kollegen."}
            outcomes = []
            for _ in range(times):
                outcomes.append(await render_agent_lines(
                    f"ws://127.0.0.1:{port}{path}", "azure" if azure else "openai", key,
                    "tts-deploy" if azure else "gpt-4o-mini-tts", "marin", lines, str(tmp_path / "cache"), {}, skip=skip))
            return sim, outcomes
        finally:
            await sim.aclose()

    return asyncio.run(main())


def test_lines_are_rendered_once_in_the_agents_voice_by_the_speech_endpoint_and_kept(tmp_path):
    sim, (outcome, again) = render_with_sim(tmp_path, times=2)
    assert all(what.startswith("rendered") for what in outcome.values()), outcome
    assert set(again.values()) == {"cached"}
    asked = sim.speech_requests
    assert {(r.voice, r.model, r.response_format) for r in asked} == {("marin", "gpt-4o-mini-tts", "pcm")}
    assert sorted(r.text for r in asked if r.speed == 1.0)[0].startswith("Entschuldigung")
    # "One moment, please." takes about 1.2 s at the simulator's pace: asked again faster, it fits in a second
    speeds = [r.speed for r in asked if r.text == "One moment, please."]
    assert speeds[0] == 1.0 and 1.1 < speeds[1] <= 1.5 and len(speeds) == 2, speeds
    assert "speed 1." in outcome["hold"]
    files = sorted((tmp_path / "cache").glob("*.ulaw"))
    assert len(files) == 3 and min(len(f.read_bytes()) for f in files) <= HOLD_MAX_MS * 8


def test_a_hold_text_that_cannot_fit_is_left_to_the_shipped_clip(tmp_path):
    sim, (outcome,) = render_with_sim(tmp_path, hold="One moment please while I look into that for you, thanks.")
    assert outcome["hold"].startswith("not rendered") and "must fit in 1000 ms" in outcome["hold"], outcome
    assert outcome["apology_hangup"].startswith("rendered")  # a line that does not fit refuses nothing else


def test_azure_renders_with_api_key_and_a_refused_key_leaves_the_shipped_clips(tmp_path):
    sim, (outcome,) = render_with_sim(tmp_path, azure=True)
    assert all(what.startswith("rendered") for what in outcome.values()) and sim.speech_requests[0].form == "azure"
    sim, (outcome,) = render_with_sim(tmp_path / "bad", key="sk-wrong")
    assert all(what.startswith("not rendered (HTTP 401: Incorrect API key provided") for what in outcome.values())
    assert sim.speech_requests == [401]  # asked once: the next two would meet the same refusal


def test_the_agents_own_wav_is_not_rendered(tmp_path):
    sim, (outcome,) = render_with_sim(tmp_path, skip=frozenset({"hold"}))
    assert outcome["hold"] == "wav" and len(sim.speech_requests) == 2
