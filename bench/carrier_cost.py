"""What the carrier simulator's own Python costs per call-second, without sockets or an event loop.

The bench's load core tops out before the stack's does (docs/explanation/measured.md#capacity), and a
load-side run mixes the carrier's Python with socket system calls and the model simulator. This drives the
real call shell (voicecore.sim.carrier's per-call tick and message handlers, the core behind them) on a fake
clock with a transport that only counts writes, and feeds each call what the gateway sends in steady talk:
every 40 ms two `media` frames and a "tag:n" mark in the gateway's own encoding (OutboundEncoder). So a change
to the carrier's hot paths can be measured before and after in seconds, with no noise from the kernel.

    python -m bench.carrier_cost [--calls 200] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from voicecore.sim import carrier
from voicecore.sim.carrier_core import CarrierCall
from voicecore.timing import FRAME_BYTES, FRAME_MS
from voicecore.carriers.twilio.stream import OutboundEncoder

CALLER_CLIP_AT_MS = 3000  # one utterance per call, so caller frames are not all the cached silent frame
CALLER_CLIP = b"\x10" * 8000


class _CountingWriter:
    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1


class _CountingTransport:
    """The parts of picows' WSTransport the carrier's listener uses."""

    is_close_frame_sent = False
    is_disconnected = False

    def __init__(self) -> None:
        self.underlying_transport = _CountingWriter()
        self.sends = 0

    def send(self, msg_type, data: bytes) -> None:
        self.sends += 1


class _FakeClock:
    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


def measure(calls: int, seconds: float) -> dict:
    """Drive ``calls`` calls for ``seconds`` of simulated time; the process CPU it took, per call-second."""
    return asyncio.run(_measure(calls, seconds))


async def _measure(calls: int, seconds: float) -> dict:
    clock = _FakeClock()
    ticker = carrier.SharedTicker(asyncio.get_running_loop(), clock)
    script = carrier.CallScript(duration_ms=10**9, utterances=((CALLER_CLIP_AT_MS, CALLER_CLIP),))
    runners = []
    for i in range(calls):
        stream_sid = "MZ%032x" % i
        core = CarrierCall("CA%032x" % i, stream_sid, "AC" + "0" * 32, "token", script.utterances,
                           play_phase_ms=0.0, keep_audio=True)
        core.opening_messages()
        runner = carrier.CallRunner(core, script, ticker)
        listener = carrier.StreamListener(runner)
        listener.on_ws_connected(_CountingTransport())
        runner.stream = listener
        runners.append((runner, OutboundEncoder(stream_sid)))
    payloads = [os.urandom(FRAME_BYTES) for _ in range(64)]
    ticks = int(seconds * 1000 / FRAME_MS)
    # The gateway's messages are made before the clock starts: they are not the carrier's cost.
    batches = []
    for k in range(1, ticks, 2):
        batches.append([(encoder.media(payloads[(k + i) % 64]), encoder.media(payloads[(k + i + 1) % 64]),
                         encoder.mark(f"7:{k + 1}")) for i, (_runner, encoder) in enumerate(runners)])
    started = time.process_time()
    for k in range(ticks):
        now_ms = float(k * FRAME_MS)
        clock.seconds = now_ms / 1000.0
        for runner, _encoder in runners:
            runner.on_tick(k * FRAME_MS, now_ms)
        if k % 2 == 1:
            clock.seconds = (now_ms + 3.0) / 1000.0  # the gateway's write lands 3 ms after the tick
            for (runner, _encoder), messages in zip(runners, batches[k // 2]):
                for message in messages:
                    runner.on_message(message, True)
    cpu_s = time.process_time() - started
    metrics = [runner.core.metrics for runner, _encoder in runners]
    return {
        "calls": calls,
        "seconds": seconds,
        "cpu_ms_per_call_second": cpu_s * 1000.0 / (calls * seconds),
        "frames_received": sum(m.frames_received for m in metrics),
        "frames_played": sum(m.frames_played for m in metrics),
        "marks_received": sum(m.marks_received for m in metrics),
        "media_sent": sum(m.media_sent for m in metrics),
        "protocol_errors": sum(m.protocol_errors for m in metrics),
        "underruns": sum(m.underruns for m in metrics),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the carrier simulator's Python cost per call-second (no sockets)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.seconds <= 0:
        parser.error("--calls must be >= 1 and --seconds > 0")
    result = measure(args.calls, args.seconds)
    print(f"carrier simulator: {result['cpu_ms_per_call_second']:.3f} ms CPU per call-second "
          f"({args.calls} calls x {args.seconds:g} s; frames received {result['frames_received']}, "
          f"played {result['frames_played']}, marks {result['marks_received']}, "
          f"caller frames sent {result['media_sent']}, protocol errors {result['protocol_errors']})")


if __name__ == "__main__":
    main()
