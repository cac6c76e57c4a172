"""The Gemini path's resampling, CPU per call-second: what share of the Gemini model worker's CPU it is.

A Gemini call resamples both ways in the model worker (voicecore/gemini/driver.py): the caller's 8 kHz mu-law
to 16 kHz PCM for every 20 ms frame of the call (the caller's audio always flows), and the model's 24 kHz
PCM back to 8 kHz mu-law for each second the model speaks (its chunks, 40 ms each from the simulator). The
OpenAI path sends and takes 8 kHz mu-law as it is. This times the carrier edge's transcoder
(voicecore/carriers/codec.py's ``EdgeTranscoder``) exactly as the driver calls it, on speech-like noise, in
CPU time of this process (``time.process_time``), over many call-seconds, and prints one JSON object:

    python -m bench.gemini_resample [--seconds 200]

``inbound_us_per_call_second``: 50 frames of caller audio resampled; ``outbound_us_per_model_second``: one
second of model audio resampled (its share of a call is the share of the call the agent speaks);
``caller_audio_message_us_per_call_second``: the whole message the driver builds for those 50 frames
(resampling, base64, JSON), for scale. Compare with the demo's ``cpu_per_call_second`` (its ``cpu_ms``
per call-second) of the same machine.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from voicecore.carriers.codec import EdgeTranscoder
from voicecore.carriers.events import ENCODING_L16
from voicecore.gemini import protocol as gp
from voicecore.gemini.driver import GeminiDriver
from voicecore.timing import FRAME_BYTES

FRAMES_PER_SECOND = 50
CHUNK_MS = 40


def _cpu_us(step, repeats: int) -> float:
    start = time.process_time()
    for _ in range(repeats):
        step()
    return (time.process_time() - start) * 1e6 / repeats


def measure(seconds: int) -> dict:
    rng = np.random.default_rng(7)
    ulaw = [bytes(rng.integers(0, 256, FRAME_BYTES, dtype=np.uint8)) for _ in range(FRAMES_PER_SECOND)]
    chunk_bytes = gp.OUTPUT_SAMPLE_RATE_HZ * 2 * CHUNK_MS // 1000
    pcm24 = [rng.normal(0, 3000, chunk_bytes // 2).astype("<i2").tobytes() for _ in range(1000 // CHUNK_MS)]
    inbound = EdgeTranscoder(ENCODING_L16, gp.INPUT_SAMPLE_RATE_HZ)
    outbound = EdgeTranscoder(ENCODING_L16, gp.OUTPUT_SAMPLE_RATE_HZ)
    driver = GeminiDriver("CAbench", model="gemini-2.5-flash", instructions="x")

    def caller_second() -> None:
        for frame in ulaw:
            inbound.from_ulaw(frame)

    def model_second() -> None:
        for chunk in pcm24:
            outbound.to_ulaw(chunk)

    def caller_messages() -> None:
        for frame in ulaw:
            driver.on_caller_audio(frame, 0)

    for step in (caller_second, model_second, caller_messages):
        step()  # warm: the filters' first design, imports
    return {
        "inbound_us_per_call_second": round(_cpu_us(caller_second, seconds), 1),
        "outbound_us_per_model_second": round(_cpu_us(model_second, seconds), 1),
        "caller_audio_message_us_per_call_second": round(_cpu_us(caller_messages, seconds), 1),
        "call_seconds": seconds,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=200, help="call-seconds to time (each direction)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.seconds)))


if __name__ == "__main__":
    main()
