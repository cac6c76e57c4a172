"""pipecat baseline for `voicecore bench --baseline pipecat`: a pipecat-ai 1.14 Twilio Media Streams server.

Runs in its own virtual environment (bench/baseline_pipecat/setup_venv.sh), never inside voicecore's,
and imports nothing from voicecore. What it is: the FastAPI WebSocket transport with
TwilioFrameSerializer(auto_hang_up=False), pipeline audio in and out at 8000 Hz, and every other transport
parameter at pipecat's default, as its users run it: audio_out_10ms_chunks=4 (a 40 ms, 320-byte media
message every 40 ms; Twilio and the bench's carrier take any whole number of 20 ms frames per message),
audio_out_auto_silence=True (the FastAPI transport never reads it: it sends nothing while idle). No RTVI,
no marks (the bench ties frames to answers by their content), and one processor standing in for the
realtime model: it speaks the same clips as the bench's model simulator, each answer dithered so its
frames are unique (dither.py), pushed 4x faster than real time as TTS audio between TTSStarted/Stopped
frames (as pipecat's speech services do: the transport pads an answer's last chunk with silence on the
stop), and reacts to the caller like the simulator's server VAD (speech = RMS >= 200 for 40 ms; barge-in
interrupts the agent; 500 ms of silence after the caller -> the next answer).

What it leaves out compared with voicecore's path (and with pipecat plus a real model service): the model
socket, the JSON and base64 of the model's events, pipecat's Silero VAD; `--baseline pipecat-realtime`
(realtime_server.py) measures pipecat with a real model socket.

Per call it appends one JSON line to --records (CLOCK_MONOTONIC ms, the bench's clock): the caller's speech
starts and stops as its VAD saw them, and per answer the clip and dither variant, when it was created, when
each group of frames was produced (the model simulator's `delta_sent_ms`), whether it was interrupted. The
bench turns them into the model simulator's record shape, so barge-in -> clear, the "model had not
produced the audio" exemption and the turn latency are computed from the same kind of data as voicecore's.

    <venv>/bin/python server.py --port-file F --records R --clips DIR --sequence a,b,c [--uds PATH] [--nice N]
"""

from __future__ import annotations

import argparse
import asyncio
import audioop
import json
import os
import sys
import time
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import Response
from loguru import logger
from pipecat.frames.frames import (
    EndFrame,
    InputAudioRawFrame,
    StartFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport
from pipecat.workers.runner import WorkerRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dither import dither_ulaw, variant_seed  # noqa: E402 (beside this file; shared with the bench)

SAMPLE_RATE = 8000
FRAME_PCM_BYTES = 320  # 20 ms of 16-bit PCM at 8 kHz
FRAME_ULAW_BYTES = 160
SPEED_FACTOR = 4.0
DELTA_FRAMES = 6  # frames pushed per "delta" (the simulator's deltas are 300-1900 bytes)
FIRST_DELTA_LATENCY_S = 0.2
VAD_RMS = 200
VAD_MIN_SPEECH_MS = 40
VAD_SILENCE_MS = 500
VARIANTS_AHEAD = 24  # dithered variants per clip made at start-up (answers up to 24 x len(sequence) per call)


def now_ms() -> float:
    return time.monotonic_ns() / 1e6


class Voices:
    """Each clip's dithered variants as 20 ms PCM frames, made before any call (their cost is the model's,
    not pipecat's): answer r of a call speaks clip r % L, variant r // L."""

    def __init__(self, clips: list[bytes]) -> None:
        self.clips = clips  # mu-law
        self._frames: dict[tuple[int, int], list[bytes]] = {}
        for index in range(len(clips)):
            for variant in range(VARIANTS_AHEAD):
                self.frames(index, variant)

    def frames(self, clip_index: int, variant: int) -> list[bytes]:
        key = (clip_index, variant)
        frames = self._frames.get(key)
        if frames is None:
            pcm = audioop.ulaw2lin(dither_ulaw(self.clips[clip_index], variant_seed(clip_index, variant)), 2)
            pcm += b"\0" * (-len(pcm) % FRAME_PCM_BYTES)
            frames = self._frames[key] = [pcm[i:i + FRAME_PCM_BYTES] for i in range(0, len(pcm), FRAME_PCM_BYTES)]
        return frames


class ModelStandIn(FrameProcessor):
    """Stands in for the realtime model: answers with clips, faster than real time, interruptible."""

    def __init__(self, voices: Voices, record: dict) -> None:
        super().__init__()
        self._voices = voices
        self._record = record
        self._responses = 0
        self._task: asyncio.Task | None = None
        self._current: dict | None = None  # the answer being pushed (its record)
        self._speaking = False
        self._speech_ms = 0
        self._silence_ms = 0

    async def _respond(self) -> None:
        r = self._responses
        self._responses += 1
        count = len(self._voices.clips)
        answer = {"index": r, "clip": r % count, "variant": r // count, "created_ms": now_ms(),
                  "first_delta_ms": None, "deltas": [], "status": "in_progress", "cancel_ms": None, "done_ms": None}
        self._record["responses"].append(answer)
        self._current = answer
        frames = self._voices.frames(answer["clip"], answer["variant"])
        await asyncio.sleep(FIRST_DELTA_LATENCY_S)
        await self.push_frame(TTSStartedFrame())
        for start in range(0, len(frames), DELTA_FRAMES):
            group = frames[start:start + DELTA_FRAMES]
            produced = now_ms()
            if answer["first_delta_ms"] is None:
                answer["first_delta_ms"] = produced
            answer["deltas"].append([len(group) * FRAME_ULAW_BYTES, produced])
            for frame in group:
                await self.push_frame(TTSAudioRawFrame(audio=frame, sample_rate=SAMPLE_RATE, num_channels=1))
            await asyncio.sleep(DELTA_FRAMES * 0.02 / SPEED_FACTOR)
        await self.push_frame(TTSStoppedFrame())
        answer["status"] = "completed"
        answer["done_ms"] = now_ms()
        self._current = None
        self._task = None

    def _start_response(self) -> None:
        self._task = self.create_task(self._respond())

    async def _interrupt(self) -> None:
        if self._task is not None:
            await self.cancel_task(self._task)
            self._task = None
        now = now_ms()
        if self._current is not None:
            self._current["status"] = "cancelled"
            self._current["cancel_ms"] = self._current["done_ms"] = now
            self._current = None
        elif self._record["responses"]:
            # Generated in full but maybe still playing (4x faster than real time): the interruption cuts it
            # (as a model's item is truncated); its unplayed frames are not lost.
            last = self._record["responses"][-1]
            frames = len(self._voices.frames(last["clip"], last["variant"]))
            if last["status"] == "completed" and last["first_delta_ms"] + frames * 20 > now:
                last["status"] = "cancelled"
                last["cancel_ms"] = now

    async def process_frame(self, frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self.push_frame(frame, direction)
            self._start_response()  # the greeting
            return
        if isinstance(frame, InputAudioRawFrame):
            speech = audioop.rms(frame.audio, 2) >= VAD_RMS
            step_ms = len(frame.audio) // 16
            if not self._speaking:
                self._speech_ms = self._speech_ms + step_ms if speech else 0
                if self._speech_ms >= VAD_MIN_SPEECH_MS:
                    self._speaking = True
                    self._silence_ms = 0
                    self._record["speech"].append([now_ms(), None])
                    await self._interrupt()
                    await self.broadcast_interruption()  # the serializer sends Twilio's clear
            else:
                self._silence_ms = 0 if speech else self._silence_ms + step_ms
                if self._silence_ms >= VAD_SILENCE_MS:
                    self._speaking = False
                    self._speech_ms = 0
                    self._record["speech"][-1][1] = now_ms()
                    self._start_response()
            return  # the caller's audio goes no further
        if isinstance(frame, (EndFrame,)):
            await self._interrupt()
        await self.push_frame(frame, direction)


def twilio_app(args: argparse.Namespace, make_pipeline) -> FastAPI:
    """The webhook and the Media Streams socket; ``make_pipeline(websocket, start, record)`` -> (worker,
    transport) for one call. Shared with realtime_server.py."""
    app = FastAPI()

    @app.post("/twilio/voice")
    async def voice(request: Request) -> Response:
        host = request.headers.get("host", "127.0.0.1")
        twiml = ('<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
                 f'<Stream url="ws://{host}/ws"><Parameter name="session_token" value="baseline"/></Stream>'
                 '</Connect></Response>')
        return Response(content=twiml, media_type="application/xml")

    @app.websocket("/ws")
    async def stream(websocket: WebSocket) -> None:
        await websocket.accept()
        start = None
        for _ in range(3):
            message = json.loads(await websocket.receive_text())
            if message.get("event") == "start":
                start = message["start"]
                break
        if start is None:
            await websocket.close(1008)
            return
        record = {"call_sid": start["callSid"], "connected_ms": now_ms(), "closed_ms": None, "speech": [],
                  "responses": []}
        serializer = TwilioFrameSerializer(
            stream_sid=start["streamSid"], call_sid=start["callSid"],
            params=TwilioFrameSerializer.InputParams(auto_hang_up=False))
        # pipecat's defaults for everything else (audio_out_10ms_chunks=4, audio_out_auto_silence=True, ...).
        transport = FastAPIWebsocketTransport(websocket=websocket, params=FastAPIWebsocketParams(
            audio_in_enabled=True, audio_out_enabled=True, add_wav_header=False, serializer=serializer,
            audio_in_sample_rate=SAMPLE_RATE, audio_out_sample_rate=SAMPLE_RATE))
        worker = make_pipeline(transport, start, record)

        @transport.event_handler("on_client_disconnected")
        async def on_disconnected(transport, client) -> None:
            await worker.cancel()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        await runner.run()
        if args.records:
            record["closed_ms"] = now_ms()
            with open(args.records, "a") as f:
                f.write(json.dumps(record) + "\n")

    return app


def stand_in_app(args: argparse.Namespace, voices: Voices) -> FastAPI:
    def make_pipeline(transport, start, record) -> PipelineWorker:
        model = ModelStandIn(voices, record)
        return PipelineWorker(Pipeline([transport.input(), model, transport.output()]),
                              params=PipelineParams(audio_in_sample_rate=SAMPLE_RATE, audio_out_sample_rate=SAMPLE_RATE),
                              enable_rtvi=False, idle_timeout_secs=None)

    return twilio_app(args, make_pipeline)


def common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--records", default="", help="append one JSON line per call here")
    parser.add_argument("--clips", required=True, help="directory of the .ulaw clips")
    parser.add_argument("--sequence", required=True, help="comma-separated clip names, cycled")
    parser.add_argument("--uds", default="", help="serve on this Unix socket instead of 127.0.0.1 (the port file then says 0)")
    parser.add_argument("--nice", type=int, default=0,
                        help="lower the process's nice value to this (the bench's --privileges on: -10, as voicecore's gateway)")


def serve(args: argparse.Namespace, app: FastAPI) -> None:
    """Run uvicorn (one event loop, as pipecat's examples do) and write the port file once it listens."""
    if args.nice:
        try:
            os.nice(args.nice - os.nice(0))
        except OSError as exc:  # no CAP_SYS_NICE: say so, run at normal priority
            print(f"pipecat baseline: cannot set nice {args.nice}: {exc}", file=sys.stderr)
    # pipecat logs every frame processor's life at DEBUG; that costs CPU per call voicecore does not spend.
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    if args.uds:
        config = uvicorn.Config(app, uds=args.uds, log_level="warning", ws="websockets")
    else:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws="websockets")
    server = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.05)
        port = 0 if args.uds else server.servers[0].sockets[0].getsockname()[1]
        Path(args.port_file + ".tmp").write_text(str(port))
        os.replace(args.port_file + ".tmp", args.port_file)
        await task

    asyncio.run(run())


def load_clips(args: argparse.Namespace) -> list[bytes]:
    return [(Path(args.clips) / f"{name}.ulaw").read_bytes() for name in args.sequence.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser()
    common_arguments(parser)
    args = parser.parse_args()
    serve(args, stand_in_app(args, Voices(load_clips(args))))


if __name__ == "__main__":
    main()
