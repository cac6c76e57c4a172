"""Rendering an agent's fallback lines in its own voice with the vendor's speech endpoint, once, at
`voicecore up`: what voicecore/fallback/lines.py then finds in the cache.

Owns the request (OpenAI's `POST /v1/audio/speech`, Azure OpenAI's `/openai/v1/audio/speech`: model, input,
voice, 24 kHz PCM back; the key as the realtime socket sends it, through the same outbound proxy), the hold
line's fit (a rendering longer than a hold line may be is asked again, spoken faster), and the summary line
`voicecore up` prints. A line the vendor will not render is reported and the shipped clip plays instead:
never a reason not to start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TextIO

import numpy as np
import orjson

from voicecore import http_client
from voicecore.fallback import KINDS
from voicecore.fallback.lines import (
    SAMPLE_RATE_HZ,
    LineAudioError,
    cache_dir,
    cache_file,
    check_line,
    line_texts,
    linear_to_line,
    max_ms,
    speech_url,
    trim_silence,
    write_cache,
)
from voicecore.realtime import events as rt
from voicecore.realtime.transport import proxy_for

SPEECH_RATE_HZ = 24_000  # response_format "pcm": 24 kHz 16-bit little-endian mono
RENDER_TIMEOUT_S = 20.0
MAX_SPEED = 1.5  # a hold line spoken faster than this sounds rushed: the shipped one plays instead


class RenderError(RuntimeError):
    """The vendor did not render a line; the message is its own where it gave one."""


async def render_line(url: str, headers: list[tuple[str, str]], model: str, voice: str, text: str,
                      speed: float = 1.0, proxy: str | None = None) -> bytes:
    """``text`` spoken in ``voice`` by the vendor, as an 8 kHz mu-law line with its silent ends trimmed."""
    request: dict = {"model": model, "input": text, "voice": voice, "response_format": "pcm"}
    if speed != 1.0:
        request["speed"] = round(speed, 3)
    try:
        status, body = await http_client.send("POST", url, [("Content-Type", "application/json"), *headers],
                                              orjson.dumps(request), timeout_s=RENDER_TIMEOUT_S, proxy=proxy,
                                              max_response_bytes=16 * 2**20)
    except (OSError, TimeoutError, ValueError) as exc:
        raise RenderError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None
    if status != 200:
        try:
            message = orjson.loads(body)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = body[:200].decode("utf-8", errors="replace")
        raise RenderError(f"HTTP {status}: {message}")
    samples = np.frombuffer(body[: len(body) // 2 * 2], dtype="<i2")
    return trim_silence(linear_to_line(samples, SPEECH_RATE_HZ))


async def render_kind(kind: str, url: str, headers: list[tuple[str, str]], model: str, voice: str, text: str,
                      proxy: str | None) -> tuple[bytes, float]:
    """A line of ``kind`` that fits (a hold line longer than it may be is asked again, faster)."""
    speed = 1.0
    audio = await render_line(url, headers, model, voice, text, speed, proxy)
    ms = len(audio) * 1000 / SAMPLE_RATE_HZ
    if ms > max_ms(kind) and kind == "hold":
        speed = min(MAX_SPEED, ms / (max_ms(kind) * 0.95))
        audio = await render_line(url, headers, model, voice, text, speed, proxy)
    check_line(kind, audio)
    return audio, speed


async def render_agent_lines(model_url: str, provider: str, api_key: str, speech_model: str, voice: str,
                             lines: Mapping[str, str], lines_cache_dir: str, environ: Mapping[str, str],
                             skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """Render each fallback line not in the cache (and not in ``skip``: the agent's own WAV files) and keep it;
    kind -> what happened ("cached", "rendered ...", "wav", or why not). Stops asking after the first refusal:
    the next two would meet it too."""
    url = speech_url(model_url)
    headers = rt.RealtimeUrl(speech_model, provider=provider).headers(api_key)
    proxy = proxy_for(url, environ)
    directory = cache_dir(lines_cache_dir, environ)
    texts = line_texts(lines)
    outcome: dict[str, str] = {}
    refused = ""
    for kind in KINDS:
        if kind in skip:
            outcome[kind] = "wav"
            continue
        path = cache_file(directory, url, speech_model, voice, texts[kind])
        try:
            check_line(kind, path.read_bytes())
            outcome[kind] = "cached"
            continue
        except (OSError, LineAudioError):
            pass
        if refused:
            outcome[kind] = f"not rendered ({refused})"
            continue
        try:
            audio, speed = await render_kind(kind, url, headers, speech_model, voice, texts[kind], proxy)
        except RenderError as exc:
            refused = str(exc)
            outcome[kind] = f"not rendered ({refused})"
            continue
        except LineAudioError as exc:  # rendered, but it cannot be this line (a hold line too long to fit)
            outcome[kind] = f"not rendered ({exc})"
            continue
        write_cache(path, audio)
        outcome[kind] = f"rendered ({len(audio) * 1000 // SAMPLE_RATE_HZ} ms" + (f", speed {speed:.2f})" if speed != 1.0 else ")")
    return outcome


def render_for_up(config, agent, environ: Mapping[str, str], out: TextIO) -> dict[str, str]:
    """`voicecore up`: the agent's fallback lines rendered where needed; one line said about them."""
    outcome = asyncio.run(render_agent_lines(
        config.model_url, config.model_provider, config.realtime_api_key, config.speech_model, agent.voice,
        agent.lines, config.lines_cache_dir, environ, skip=frozenset(agent.line_audio)))
    said = ", ".join(f"{kind} {what}" for kind, what in outcome.items())
    shipped = any(what.startswith("not rendered") for what in outcome.values())
    print(f"voicecore up: fallback lines in voice {agent.voice}: {said}"
          + ("; the shipped clips play for the rest" if shipped else ""), file=out, flush=True)
    return outcome
