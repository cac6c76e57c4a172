"""A stored call -> OpenTelemetry spans, after the fact: one trace per call, one span per turn.

Owns the mapping from a ``CallSummary`` (summary.py) to spans and the decision whether tracing is on. The
recorder worker hands each call it ingests to ``TurnTracer.export``; the spans get explicit start and end
times (nanoseconds since the epoch: the call's wall-clock ``started_at`` plus the summary's millisecond
offsets), so a trace shows the call as it happened, not when it was ingested.

The spans of one call:

- ``call``: the whole call (0 -> ``duration_ms``); ``voicecore.call_sid``, ``voicecore.agent``,
  ``voicecore.outcome``, ``voicecore.turns``, ``voicecore.control``, ``voicecore.complete``;
- ``turn`` (child of ``call``), per turn: from the earliest time the turn has (its speech start, as a rule)
  to the latest of its answer's first audio and its barge-in, so what the caller waited and how far the
  answer got before the caller cut it are both inside it; a turn never answered lasts until the next turn
  starts or the call ends (the caller was still talking, or waited in vain). ``voicecore.turn.index``,
  ``.latency_ms`` (when answered),
  ``.answered``, ``.barged_in``, ``.transcript_chars`` (the caller's words), ``.agent_text_chars``; a
  ``barged_in`` event at the barge-in (``voicecore.turn.truncated_at_ms``: how much of the answer was heard);
- ``caller speech`` (child of ``turn``): ``speech_started`` -> ``speech_stopped``;
- ``waiting`` (child of ``turn``): ``speech_stopped`` -> the first audio (unanswered: the turn's end), with a
  ``response_requested`` event when the driver asked for the answer (turns control);
- ``tool <name>``: ``called_ms`` -> ``result_ms`` (an action that runs no tool: zero length), child of the
  turn it happened in (else of ``call``); ``voicecore.tool.name``, ``.ran``, ``.ok`` (status ERROR when
  not ok).

Caller words are personal data: spans carry lengths and timings only, never a transcript, a tool's
arguments or output, or a verdict's reason (the call store keeps those, under its own retention).

Tracing is on when ``opentelemetry-sdk`` is importable (``pip install -e '.[otel]'``) and the standard
environment configures an exporter: ``OTEL_TRACES_EXPORTER`` set and not ``none`` (``otlp``, ``console``, or
any name an installed exporter registers), or ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set (OTLP), or ``VOICECORE_OTEL=console`` (spans printed as JSON on
stdout). OTLP uses ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``: ``http/protobuf`` (the default) needs
``opentelemetry-exporter-otlp-proto-http``, ``grpc`` needs ``opentelemetry-exporter-otlp-proto-grpc``.
``OTEL_SDK_DISABLED=true`` turns it off; sampler, resource and endpoint settings are the SDK's own.
opentelemetry is imported lazily here, so voicecore runs without it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from voicecore.store.summary import NS_PER_MS, CallSummary, ToolCall, Turn

log = logging.getLogger("voicecore.store.traces")

TRACER_NAME = "voicecore.store.traces"
SERVICE_NAME = "voicecore"  # unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names the service
OTLP_EXPORTERS = {  # OTLP protocol -> (the package that implements it, the module with its OTLPSpanExporter)
    "http/protobuf": ("opentelemetry-exporter-otlp-proto-http", "opentelemetry.exporter.otlp.proto.http.trace_exporter"),
    "grpc": ("opentelemetry-exporter-otlp-proto-grpc", "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"),
}
DEFAULT_OTLP_PROTOCOL = "http/protobuf"  # the OpenTelemetry specification's default


class TurnTracer:
    """Makes the spans of stored calls with a tracer provider (the SDK's ``TracerProvider`` as a rule)."""

    def __init__(self, tracer_provider: Any) -> None:
        self.provider = tracer_provider
        self.tracer = tracer_provider.get_tracer(TRACER_NAME)

    @classmethod
    def from_environment(cls) -> TurnTracer | None:
        """A tracer exporting where the environment says, or None: the SDK is not installed, nothing is
        configured, tracing is disabled, or a configured exporter is missing (one warning says which)."""
        names = _exporter_names(os.environ)
        if not names:
            return None
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            log.warning("traces: %s configures traces, but opentelemetry-sdk is not installed "
                        "(pip install -e '.[otel]'); no traces", _configured_by(os.environ))
            return None
        exporters = []
        for name in names:
            exporter = _exporter(name)
            if exporter is None:
                return None
            exporters.append(exporter)
        provider = TracerProvider(resource=Resource.create(_default_resource(os.environ)))
        for exporter in exporters:
            # batched: exporting happens on the SDK's thread, never inside the recorder's ingest slice
            provider.add_span_processor(BatchSpanProcessor(exporter))
        log.info("traces: one span per turn, exported to %s", ", ".join(names))
        return cls(provider)

    def export(self, summary: CallSummary) -> int:
        """Make the spans of one call (handed to the provider's processors as each ends); how many."""
        from opentelemetry import trace

        base_ns = round(summary.started_at * 1e9)

        def at(ms: int) -> int:
            return base_ns + ms * NS_PER_MS

        call = self.tracer.start_span("call", start_time=at(0), attributes={
            "voicecore.call_sid": summary.call_sid, "voicecore.agent": summary.agent,
            "voicecore.outcome": summary.outcome, "voicecore.turns": len(summary.turns),
            "voicecore.control": summary.control, "voicecore.complete": summary.complete})
        in_call = trace.set_span_in_context(call)
        made = 1
        turn_spans = []  # (start ms, end ms, the turn's context): where a tool call belongs
        for turn, (start_ms, end_ms) in _turn_bounds(summary):
            span = self.tracer.start_span("turn", context=in_call, start_time=at(start_ms),
                                          attributes=_turn_attributes(turn))
            in_turn = trace.set_span_in_context(span)
            made += 1
            if turn.speech_started_ms is not None and turn.speech_stopped_ms is not None:
                speech = self.tracer.start_span("caller speech", context=in_turn, start_time=at(turn.speech_started_ms))
                speech.end(end_time=at(turn.speech_stopped_ms))
                made += 1
            if turn.speech_stopped_ms is not None and end_ms > turn.speech_stopped_ms:
                waiting_end_ms = turn.first_audio_ms if turn.first_audio_ms is not None else end_ms
                waiting = self.tracer.start_span("waiting", context=in_turn, start_time=at(turn.speech_stopped_ms))
                if turn.response_requested_ms is not None:
                    waiting.add_event("response_requested", timestamp=at(turn.response_requested_ms))
                waiting.end(end_time=at(waiting_end_ms))
                made += 1
            if turn.barged_in_ms is not None:
                heard = {} if turn.truncated_at_ms is None else {"voicecore.turn.truncated_at_ms": turn.truncated_at_ms}
                span.add_event("barged_in", attributes=heard, timestamp=at(turn.barged_in_ms))
            span.end(end_time=at(end_ms))
            turn_spans.append((start_ms, end_ms, in_turn))
        for tool in summary.tool_calls:
            bounds = _tool_bounds(tool)
            if bounds is None:
                continue
            start_ms, end_ms = bounds
            parent = next((context for first, last, context in reversed(turn_spans) if first <= start_ms <= last), in_call)
            span = self.tracer.start_span(f"tool {tool.name}", context=parent, start_time=at(start_ms),
                                          attributes=_tool_attributes(tool))
            if tool.ok is False:
                span.set_status(trace.Status(trace.StatusCode.ERROR))
            span.end(end_time=at(end_ms))
            made += 1
        call.end(end_time=at(summary.duration_ms))
        return made

    def shutdown(self) -> None:
        """Export what is still batched and stop the provider's processors."""
        self.provider.shutdown()


# --- the spans' times and attributes ---------------------------------------------------------------------
def _turn_bounds(summary: CallSummary) -> list[tuple[Turn, tuple[int, int]]]:
    """Each turn with a time (start ms, end ms): the earliest time it has to its answer's first audio or
    barge-in, whichever is later; unanswered, to the next turn's start or the call's end."""
    known = [(turn, [ms for ms in (turn.speech_started_ms, turn.speech_stopped_ms, turn.response_requested_ms,
                                   turn.first_audio_ms, turn.barged_in_ms) if ms is not None])
             for turn in summary.turns]
    known = [(turn, times) for turn, times in known if times]  # a transcript without timing: nowhere to place it
    bounds = []
    for position, (turn, times) in enumerate(known):
        start_ms, end_ms = min(times), max(times)
        if turn.first_audio_ms is None and turn.barged_in_ms is None:
            later = [min(next_times) for _, next_times in known[position + 1:]]
            end_ms = max(end_ms, min(later) if later else summary.duration_ms)
        bounds.append((turn, (start_ms, end_ms)))
    return bounds


def _turn_attributes(turn: Turn) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "voicecore.turn.index": turn.index, "voicecore.turn.answered": turn.first_audio_ms is not None,
        "voicecore.turn.barged_in": turn.barged_in_ms is not None,
        "voicecore.turn.transcript_chars": len(turn.transcript), "voicecore.turn.agent_text_chars": len(turn.agent_text)}
    if turn.latency_ms is not None:
        attributes["voicecore.turn.latency_ms"] = turn.latency_ms
    return attributes


def _tool_bounds(tool: ToolCall) -> tuple[int, int] | None:
    start_ms = tool.called_ms if tool.called_ms is not None else tool.result_ms
    if start_ms is None:
        return None
    end_ms = tool.result_ms if tool.result_ms is not None and tool.result_ms >= start_ms else start_ms
    return start_ms, end_ms


def _tool_attributes(tool: ToolCall) -> dict[str, Any]:
    attributes: dict[str, Any] = {"voicecore.tool.name": tool.name, "voicecore.tool.ran": tool.ran}
    if tool.ok is not None:
        attributes["voicecore.tool.ok"] = tool.ok
    return attributes


# --- what the environment configures ---------------------------------------------------------------------
def _exporter_names(environ: Any) -> list[str]:
    """The trace exporters the environment asks for, in order, without repeats; [] for none."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    listed = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if listed:
        names = [name.strip() for name in listed.split(",") if name.strip()]
        if "none" in names:
            return []
    elif environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        names = ["otlp"]
    else:
        names = []
    if environ.get("VOICECORE_OTEL", "").strip().lower() == "console":
        names.append("console")
    return list(dict.fromkeys(names))


def _configured_by(environ: Any) -> str:
    return ", ".join(name for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                                       "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "VOICECORE_OTEL") if environ.get(name))


def _default_resource(environ: Any) -> dict[str, str]:
    """service.name ``voicecore``, unless the environment names the service (its own names win)."""
    if environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        return {}
    return {"service.name": SERVICE_NAME}


def _exporter(name: str) -> Any | None:
    """The span exporter called ``name``; None after one warning when it is not installed."""
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stdout)  # today's stdout (its default is the one at import)
    if name == "otlp":
        protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                    or DEFAULT_OTLP_PROTOCOL).strip().lower()
        if protocol not in OTLP_EXPORTERS:
            log.warning("traces: OTLP protocol %r is not supported here (use %s); no traces",
                        protocol, " or ".join(OTLP_EXPORTERS))
            return None
        package, module = OTLP_EXPORTERS[protocol]
        try:
            exporter_class = getattr(__import__(module, fromlist=["OTLPSpanExporter"]), "OTLPSpanExporter")
        except ImportError:
            log.warning("traces: OTLP (%s) is configured by %s, but %s is not installed (pip install %s); no traces",
                        protocol, _configured_by(os.environ), package, package)
            return None
        return exporter_class()
    # any other name: an exporter package registers it, as the SDK's own auto-configuration finds them
    from importlib.metadata import entry_points

    found = entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        log.warning("traces: OTEL_TRACES_EXPORTER names %r, but no installed package provides that exporter; no traces", name)
        return None
    return next(iter(found)).load()()
