"""pipecat baseline for `voicecore bench --baseline pipecat`: a pipecat-ai 1.14 Twilio Media Streams server.

Runs in its own virtual environment (bench/baseline_pipecat/setup_venv.sh), never inside voicecore's,
and imports nothing from voicecore. What it is: the FastAPI WebSocket transport with
TwilioFrameSerializer(auto_hang_up=False), pipeline audio in and out at 8000 Hz and
audio_out_10ms_chunks=2 (so it sends 160-byte, 20 ms frames like voicecore), audio_out_auto_silence off
(speech frames only on the wire, as voicecore sends), no RTVI, and one
processor standing in for the realtime model: it speaks the same clips as the bench's model simulator,
pushed 4x faster than real time, and reacts to the caller like the simulator's server VAD (speech =
RMS >= 200 for 40 ms; barge-in interrupts the agent; 500 ms of silence after the caller -> next answer).
So the bench's carrier simulator can measure it the same way, it sends Twilio marks named like
voicecore's ("tag:n" after every 5 frames, "tag:n:end" at the end of an answer) through the transport's
ordered output queue. Each call's speech-start times (CLOCK_MONOTONIC ms) are appended as a JSON line
to --records so barge-in -> clear is timed from the same decision point as for voicecore.

    <venv>/bin/python server.py --port-file F --records R --clips DIR --sequence a,b,c [--uds PATH]
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
    OutputAudioRawFrame,
    OutputTransportMessageFrame,
    StartFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport
from pipecat.workers.runner import WorkerRunner

SAMPLE_RATE = 8000
FRAME_PCM_BYTES = 320  # 20 ms of 16-bit PCM at 8 kHz
MARK_EVERY_FRAMES = 5
SPEED_FACTOR = 4.0
DELTA_FRAMES = 6  # frames pushed per "delta" (the simulator's deltas are 300-1900 bytes)
FIRST_DELTA_LATENCY_S = 0.2
VAD_RMS = 200
VAD_MIN_SPEECH_MS = 40
VAD_SILENCE_MS = 500


def now_ms() -> float:
    return time.monotonic_ns() / 1e6


class ModelStandIn(FrameProcessor):
    """Stands in for the realtime model: answers with clips, faster than real time, interruptible."""

    def __init__(self, clips: list[bytes], stream_sid: str, record: dict) -> None:
        super().__init__()
        self._clips = clips
        self._stream_sid = stream_sid
        self._record = record
        self._responses = 0
        self._tag = 0
        self._sent_frames = 0  # frames of the current tag pushed so far
        self._task: asyncio.Task | None = None
        self._speaking = False
        self._speech_ms = 0
        self._silence_ms = 0

    def _mark(self, name: str) -> OutputTransportMessageFrame:
        return OutputTransportMessageFrame(message={"event": "mark", "streamSid": self._stream_sid, "mark": {"name": name}})

    async def _respond(self) -> None:
        pcm = self._clips[self._responses % len(self._clips)]
        self._responses += 1
        self._tag += 1
        tag = self._tag
        self._sent_frames = 0
        await asyncio.sleep(FIRST_DELTA_LATENCY_S)
        frames = [pcm[i:i + FRAME_PCM_BYTES] for i in range(0, len(pcm), FRAME_PCM_BYTES)]
        sent = 0
        for start in range(0, len(frames), DELTA_FRAMES):
            for frame in frames[start:start + DELTA_FRAMES]:
                await self.push_frame(OutputAudioRawFrame(audio=frame, sample_rate=SAMPLE_RATE, num_channels=1))
                sent += 1
                self._sent_frames = sent
                if sent % MARK_EVERY_FRAMES == 0 and sent < len(frames):
                    await self.push_frame(self._mark(f"{tag}:{sent}"))
            await asyncio.sleep(DELTA_FRAMES * 0.02 / SPEED_FACTOR)
        await self.push_frame(self._mark(f"{tag}:{sent}:end"))
        self._task = None

    def _start_response(self) -> None:
        self._task = self.create_task(self._respond())

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
                    self._record["speech_started_ms"].append(now_ms())
                    if self._task is not None:
                        await self.cancel_task(self._task)
                        self._task = None
                    await self.broadcast_interruption()
                    if self._tag:
                        # A frame the transport was already writing goes out after the clear. This mark
                        # (queued behind the clear) tells the carrier it belongs to the interrupted
                        # answer, so it is counted as stale instead of as the next answer's first frame.
                        await self.push_frame(self._mark(f"{self._tag}:{self._sent_frames}"))
            else:
                self._silence_ms = 0 if speech else self._silence_ms + step_ms
                if self._silence_ms >= VAD_SILENCE_MS:
                    self._speaking = False
                    self._speech_ms = 0
                    self._start_response()
            return  # the caller's audio goes no further
        if isinstance(frame, (EndFrame,)) and self._task is not None:
            await self.cancel_task(self._task)
            self._task = None
        await self.push_frame(frame, direction)


def build_app(args: argparse.Namespace, clips: list[bytes]) -> FastAPI:
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
        record = {"call_sid": start["callSid"], "connected_ms": now_ms(), "speech_started_ms": []}
        serializer = TwilioFrameSerializer(
            stream_sid=start["streamSid"], call_sid=start["callSid"],
            params=TwilioFrameSerializer.InputParams(auto_hang_up=False))
        transport = FastAPIWebsocketTransport(websocket=websocket, params=FastAPIWebsocketParams(
            audio_in_enabled=True, audio_out_enabled=True, add_wav_header=False, serializer=serializer,
            audio_in_sample_rate=SAMPLE_RATE, audio_out_sample_rate=SAMPLE_RATE, audio_out_10ms_chunks=2,
            # Off so the wire carries speech frames only, like voicecore's: with it on, pipecat fills every
            # idle 20 ms with a silent frame, which the carrier would count as the next answer's audio
            # (lateness) and which would hide gaps inside an answer (underruns).
            audio_out_auto_silence=False))
        model = ModelStandIn(clips, start["streamSid"], record)
        worker = PipelineWorker(Pipeline([transport.input(), model, transport.output()]),
                                params=PipelineParams(audio_in_sample_rate=SAMPLE_RATE, audio_out_sample_rate=SAMPLE_RATE),
                                enable_rtvi=False, idle_timeout_secs=None)

        @transport.event_handler("on_client_disconnected")
        async def on_disconnected(transport, client) -> None:
            await worker.cancel()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        await runner.run()
        with open(args.records, "a") as f:
            f.write(json.dumps(record) + "\n")

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--clips", required=True, help="directory of the .ulaw clips")
    parser.add_argument("--sequence", required=True, help="comma-separated clip names, cycled")
    parser.add_argument("--uds", default="", help="serve on this Unix socket instead of 127.0.0.1 (the port file then says 0)")
    args = parser.parse_args()
    # pipecat logs every frame processor's life at DEBUG; that costs CPU per call voicecore does not spend.
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    clips = []
    for name in args.sequence.split(","):
        pcm = audioop.ulaw2lin((Path(args.clips) / f"{name}.ulaw").read_bytes(), 2)
        pcm += b"\0" * (-len(pcm) % FRAME_PCM_BYTES)
        clips.append(pcm)
    app = build_app(args, clips)
    if args.uds:
        config = uvicorn.Config(app, uds=args.uds, log_level="warning", ws="websockets")
    else:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws="websockets")
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.05)
        port = 0 if args.uds else server.servers[0].sockets[0].getsockname()[1]
        Path(args.port_file + ".tmp").write_text(str(port))
        os.replace(args.port_file + ".tmp", args.port_file)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
