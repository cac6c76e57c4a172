"""pipecat baseline with a real model socket, for `voicecore bench --baseline pipecat-realtime`.

The same Twilio transport and defaults as server.py (FastAPI WebSocket transport, TwilioFrameSerializer,
8000 Hz, pipecat's default 40 ms output chunks, no marks), but the model is pipecat's own
OpenAIRealtimeLLMService (pipecat.services.openai.realtime.llm, pipecat-ai 1.14) connected over a WebSocket
to the bench's model simulator (the one voicecore's model worker talks to, bench/simproc.py), in the
pipeline pipecat's examples build: transport in -> user context aggregator -> realtime LLM -> transport
out -> assistant context aggregator, the greeting asked for with an LLMRunFrame, turns driven by the
simulator's server VAD (speech_started interrupts: pipecat truncates the item and the serializer sends
Twilio's clear; speech_stopped: the server answers). So the work is the same as voicecore's: a model
socket per call, every model event parsed from JSON (pipecat validates each into a pydantic model), base64
audio both ways.

One adaptation, and why: pipecat 1.14's service reads and writes audio as 24 kHz PCM16 whatever the session
says (`_send_user_audio` resamples to OPENAI_SAMPLE_RATE; `_handle_evt_audio_delta` wraps every delta as
24 kHz PCM), while the simulator speaks only 8 kHz G.711 mu-law (audio/pcmu, as OpenAI offers for
telephony) and refuses to answer until the session selects it. Pointed at the simulator unchanged, with
the session set to audio/pcmu, the service would send 24 kHz PCM labelled mu-law and play mu-law deltas
as 24 kHz PCM (noise the bench cannot tie to any answer). G711RealtimeService overrides exactly those two
methods to use the session's audio/pcmu at 8 kHz: caller audio is mu-law encoded (audioop, no
resampling) and each delta is decoded to 8 kHz PCM. That is less work than the stock 24 kHz path
(pipecat's users on Twilio resample 8 <-> 24 kHz with soxr both ways and send 6x the bytes), so this
variant errs in pipecat's favour. The truncation arithmetic is kept right by counting each mu-law byte
as the 6 bytes of 24 kHz PCM it stands for.

The model session carries the call's CallSid in the simulator's correlation header (X-Voicecore-Call, which
a real vendor ignores) so the bench lines the simulator's records up with the carrier's calls.

    <venv>/bin/python realtime_server.py --port-file F --clips DIR --sequence a,b --realtime-url ws://127.0.0.1:P/v1/realtime
"""

from __future__ import annotations

import argparse
import audioop
import base64
import sys
import time
from pathlib import Path

from pipecat.frames.frames import LLMRunFrame, TTSAudioRawFrame, TTSStartedFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.services.openai.realtime import events
from pipecat.services.openai.realtime.llm import CurrentAudioResponse, OpenAIRealtimeLLMService

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import SAMPLE_RATE, common_arguments, serve, twilio_app  # noqa: E402 (beside this file)

CALL_HEADER = "X-Voicecore-Call"  # the simulator's model-session correlation header (voicecore/sim/model_server.py)
PCM24_BYTES_PER_ULAW_BYTE = 6  # one 8 kHz mu-law byte is 3 samples of 24 kHz PCM16


class G711RealtimeService(OpenAIRealtimeLLMService):
    """pipecat's OpenAI Realtime service with audio/pcmu (8 kHz mu-law) on the model socket (module docstring)."""

    def __init__(self, *, call_sid: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self._call_sid = call_sid

    async def _auth_headers(self) -> dict[str, str]:
        headers = await super()._auth_headers()
        headers[CALL_HEADER] = self._call_sid
        return headers

    async def _send_user_audio(self, frame) -> None:
        audio = frame.audio
        if frame.sample_rate != SAMPLE_RATE:
            audio = await self._resampler.resample(audio, frame.sample_rate, SAMPLE_RATE)
        if not audio:
            return
        payload = base64.b64encode(audioop.lin2ulaw(audio, 2)).decode("ascii")
        await self.send_client_event(events.InputAudioBufferAppendEvent(audio=payload))

    async def _handle_evt_audio_delta(self, evt) -> None:
        # The stock method, with the delta decoded from mu-law at 8 kHz instead of read as 24 kHz PCM.
        await self.stop_ttfb_metrics()
        if not self._current_audio_response:
            self._current_audio_response = CurrentAudioResponse(
                item_id=evt.item_id, content_index=evt.content_index, start_time_ms=int(time.time() * 1000),
                response_id=evt.response_id)
            await self.push_frame(TTSStartedFrame())
        elif self._current_audio_response.item_id != evt.item_id:
            self._current_audio_response.item_id = evt.item_id
            self._current_audio_response.content_index = evt.content_index
            self._current_audio_response.response_id = evt.response_id
            self._current_audio_response.start_time_ms = int(time.time() * 1000)
            self._current_audio_response.total_size = 0
        ulaw = base64.b64decode(evt.delta)
        self._current_audio_response.total_size += len(ulaw) * PCM24_BYTES_PER_ULAW_BYTE
        await self.push_frame(TTSAudioRawFrame(audio=audioop.ulaw2lin(ulaw, 2), sample_rate=SAMPLE_RATE, num_channels=1))


def realtime_app(args: argparse.Namespace):
    pcmu = events.PCMUAudioFormat()
    session = events.SessionProperties(
        audio=events.AudioConfiguration(input=events.AudioInput(format=pcmu), output=events.AudioOutput(format=pcmu)))

    def make_pipeline(transport, start, record) -> PipelineWorker:
        llm = G711RealtimeService(
            call_sid=start["callSid"], api_key="bench", base_url=args.realtime_url,
            settings=OpenAIRealtimeLLMService.Settings(model=args.model, session_properties=session.model_copy(deep=True)))
        context = LLMContext()
        aggregators = LLMContextAggregatorPair(context)
        worker = PipelineWorker(
            Pipeline([transport.input(), aggregators.user(), llm, transport.output(), aggregators.assistant()]),
            params=PipelineParams(audio_in_sample_rate=SAMPLE_RATE, audio_out_sample_rate=SAMPLE_RATE),
            enable_rtvi=False, idle_timeout_secs=None)

        @transport.event_handler("on_client_connected")
        async def on_connected(transport, client) -> None:
            await worker.queue_frames([LLMRunFrame()])  # the greeting

        return worker

    return twilio_app(args, make_pipeline)


def main() -> None:
    parser = argparse.ArgumentParser()
    common_arguments(parser)
    parser.add_argument("--realtime-url", required=True, help="the model simulator's ws://host:port/v1/realtime")
    parser.add_argument("--model", default="gpt-realtime", help="model name sent in the URL and session")
    args = parser.parse_args()
    serve(args, realtime_app(args))


if __name__ == "__main__":
    main()
