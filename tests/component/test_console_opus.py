"""A call's recording as Opus in Ogg (``/api/calls/SID/audio.opus``), the small rendition for long calls.

- ``media.opus`` (unit): the file decodes (libsndfile reads it back), is stereo at 8 kHz, holds the call's
  duration (within 60 ms) with the caller left and the agent right, and is much smaller than the WAV.
- The console serves it as it serves the WAV: byte ranges (206, 416), a finished call's cacheable (private,
  ETag, 304), a live call's not stored; a call whose record holds no audio is a 404, not a broken file.
"""

from __future__ import annotations

import gzip
import http.client
import io
import re
import wave

import numpy as np
import pytest
import soundfile
from console_alone import DEMO_RECORD, ConsoleAlone, start_console

from voicecore.console import media
from voicecore.g711 import linear_to_ulaw

DURATION_SLACK_S = 0.060


def tone(seconds: float, hz: float, amplitude: int = 8000) -> bytes:
    """A tone as 8 kHz mu-law, with a pause every other second (speech-like on and off)."""
    t = np.arange(int(seconds * 8000)) / 8000
    gate = (np.floor(t) % 2 == 0).astype(float)
    return linear_to_ulaw((amplitude * gate * np.sin(2 * np.pi * hz * t)).astype(np.int16))


def decoded(body: bytes) -> tuple[np.ndarray, soundfile._SoundFileInfo]:
    info = soundfile.info(io.BytesIO(body))
    samples, _ = soundfile.read(io.BytesIO(body), dtype="int16")
    return samples, info


def test_the_opus_file_holds_both_tracks_for_the_calls_duration():
    caller, agent = tone(30, 300), b"\xff" * 8000 * 5 + tone(25, 700)
    body = media.opus(caller, agent)
    samples, info = decoded(body)
    assert (info.format, info.subtype, info.channels, info.samplerate) == ("OGG", "OPUS", 2, 8000)
    assert abs(samples.shape[0] / 8000 - 30.0) <= DURATION_SLACK_S
    # caller left, agent right: the agent is silent for its first 5 s, the caller is not
    first_seconds = np.abs(samples[: 8000 * 4].astype(np.int32)).mean(axis=0)
    assert first_seconds[0] > 1000 and first_seconds[1] < 50, first_seconds
    # the tones come back as themselves: the strongest frequency of each channel's first loud second
    for channel, hz, start in ((0, 300, 0), (1, 700, 5 * 8000)):
        spectrum = np.abs(np.fft.rfft(samples[start:start + 8000, channel].astype(float)))
        assert abs(int(np.argmax(spectrum)) - hz) <= 2, (channel, np.argmax(spectrum))
    wav = media.wav(caller, agent)
    assert len(body) * 5 < len(wav), (len(body), len(wav))


def test_tracks_of_different_lengths_are_the_longer_ones_length():
    body = media.opus(tone(3, 440), tone(7.5, 440))
    samples, _ = decoded(body)
    assert abs(samples.shape[0] / 8000 - 7.5) <= DURATION_SLACK_S


@pytest.fixture(scope="module")
def console(tmp_path_factory) -> ConsoleAlone:
    running = start_console(tmp_path_factory.mktemp("console"))
    yield running
    running.stop()


def get(console: ConsoleAlone, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    """(status, headers with lower-case names, body) of a GET of the stored call's ``path``."""
    connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=60)  # a first encoding takes a moment
    try:
        connection.request("GET", f"/api/calls/{console.sid}/{path}",
                           headers={"Authorization": f"Bearer {console.key}", **(headers or {})})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.mark.integration
def test_it_decodes_to_the_wavs_duration_in_stereo_and_is_much_smaller(console):
    status, headers, body = get(console, "audio.opus")
    assert status == 200 and headers["content-type"] == "audio/ogg; codecs=opus", headers
    assert int(headers["content-length"]) == len(body)
    _, _, wav_body = get(console, "audio.wav")
    with wave.open(io.BytesIO(wav_body)) as wav:
        wav_seconds = wav.getnframes() / wav.getframerate()
    samples, info = decoded(body)
    assert info.channels == 2 and info.samplerate == 8000
    assert abs(samples.shape[0] / 8000 - wav_seconds) <= DURATION_SLACK_S, (samples.shape, wav_seconds)
    ratio = len(wav_body) / len(body)
    print(f"\nthe demo call ({wav_seconds:.1f} s): WAV {len(wav_body)} bytes, Opus {len(body)} bytes: {ratio:.1f}x smaller")
    assert ratio > 5


@pytest.mark.integration
def test_it_is_served_in_byte_ranges(console):
    status, _, whole = get(console, "audio.opus")
    size = len(whole)
    for spec, first, last in [("bytes=0-3", 0, 3), ("bytes=1000-", 1000, size - 1), ("bytes=-500", size - 500, size - 1)]:
        status, headers, body = get(console, "audio.opus", {"Range": spec})
        assert status == 206 and headers["accept-ranges"] == "bytes", spec
        assert headers["content-range"] == f"bytes {first}-{last}/{size}" and body == whole[first:last + 1], spec
        assert headers["content-type"] == "audio/ogg; codecs=opus"
    assert whole[:4] == b"OggS"
    parts = [get(console, "audio.opus", {"Range": f"bytes={at}-{min(at + 9_999, size - 1)}"})[2]
             for at in range(0, size, 10_000)]
    assert b"".join(parts) == whole  # the same bytes each time: encoded once, kept
    status, headers, _ = get(console, "audio.opus", {"Range": f"bytes={size}-"})
    assert status == 416 and headers["content-range"] == f"bytes */{size}"


@pytest.mark.integration
def test_a_finished_calls_opus_is_cacheable(console):
    status, headers, whole = get(console, "audio.opus")
    etag = headers["etag"]
    assert status == 200 and re.fullmatch(r'"[0-9a-f]{24}"', etag)
    assert headers["cache-control"] == "private, no-cache"
    assert etag != get(console, "audio.wav")[1]["etag"]  # other bytes, another tag
    status, headers, body = get(console, "audio.opus", {"If-None-Match": etag})
    assert (status, body, headers["etag"]) == (304, b"", etag)
    assert get(console, "audio.opus", {"Range": "bytes=0-9", "If-Range": etag})[0] == 206
    status, _, body = get(console, "audio.opus", {"Range": "bytes=0-9", "If-Range": '"older"'})
    assert status == 200 and body == whole


@pytest.mark.integration
def test_a_live_calls_opus_is_not_stored(tmp_path):
    running = start_console(tmp_path)
    try:
        etag = get(running, "audio.opus")[1]["etag"]
        running.mark_live()
        status, headers, whole = get(running, "audio.opus", {"If-None-Match": etag})
        assert status == 200 and headers["cache-control"] == "no-store" and "etag" not in headers
        status, headers, body = get(running, "audio.opus", {"Range": "bytes=10-19"})
        assert status == 206 and body == whole[10:20] and headers["cache-control"] == "no-store"
    finally:
        running.stop()


@pytest.mark.integration
def test_a_record_without_audio_is_a_404_not_a_broken_file(tmp_path):
    """A record cut before any audio (a call that failed at once): the WAV is empty, there is no Opus to make."""
    running = start_console(tmp_path)
    try:
        record = tmp_path / "records" / DEMO_RECORD.name.removesuffix(".gz")
        header_line = gzip.decompress(DEMO_RECORD.read_bytes()).split(b"\n", 1)[0]
        record.write_bytes(header_line + b"\n")
        status, _, body = get(running, "audio.opus")
        assert status == 404 and b"no audio" in body, body
        assert "Traceback" not in running.log()
    finally:
        running.stop()
