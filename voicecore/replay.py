"""Replay a call record through a fresh controller with a virtual clock (INV-REPLAY,
docs/explanation/architecture.md#section-9).

The header's ``control`` says which driver ran the call: ``turns`` (the turn-taking CallController, also
when the key is missing) or ``spine`` (voicecore/call/spine.py: the model worker's core alone); the replay
builds the same one.

Owns the replay driver, the comparison of outputs, and the stereo WAV of a replayed call. Uses no
process, socket, sleep or wall clock in the replay itself: the clock is each entry's recorded ``t``.
The record format is documented in voicecore/call/record.py.

``voicecore replay FILE [--wav OUT] [--json]``: exit 0 if the replay reproduced every recorded action,
1 on the first divergence (reported as time, expected, got), 2 if the file is not a record.

An incomplete record (a ``.part`` file a killed model worker left, or a last line cut short) replays the
complete lines it has; the report says ``"complete": false``. Its last input's actions may have been cut
off with it: there, recorded actions that are a prefix of the replayed ones are not a divergence.

A record made before idempotency keys named the call holds RunTool keys of the function and arguments
alone; such a key is read as the key the same action of that call has now (``recorded_action``), so old
records still replay. Any other difference in a key is a divergence.
"""

from __future__ import annotations

import argparse
import binascii
import dataclasses
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from voicecore import timing
from voicecore.agent import actions as agent_actions
from voicecore.agent.flow import AgentFlow
from voicecore.call import flow as flows
from voicecore.call.actions import Action, CancelTag, WriteFrames, action_to_dict
from voicecore.call.controller import CallController, ControllerConfig
from voicecore.call.driver import Driver, forwarding_actions
from voicecore.call.record import INPUT_KINDS, RecordError, playout_from
from voicecore.call.record_reader import ANY, ActionHandler, InputHandler, RecordConsumer, RecordReader, read_entries
from voicecore.call.spine import SpineDriver
from voicecore.privacy.records import RecordPrivacy
from voicecore.g711 import PCMA, PCMU, silence_byte, to_ulaw, write_stereo_wav
from voicecore.record import load_record

FLOWS: dict[str, Callable[..., flows.Flow]] = {flows.ScriptedFlow.name: flows.ScriptedFlow, AgentFlow.name: AgentFlow}
MU_LAW_SILENCE = 0xFF


@dataclasses.dataclass(frozen=True, slots=True)
class Divergence:
    t_ns: int
    input_kind: str
    index: int  # which output of that input
    expected: dict | None  # None: the replay produced an extra action
    got: dict | None  # None: the replay produced fewer actions


@dataclasses.dataclass(slots=True)
class ReplayResult:
    identical: bool
    divergence: Divergence | None
    inputs: int
    outputs: int
    call_ns: int  # recorded time from the first to the last entry
    timed_actions: list[tuple[int, Action]]  # every action the replay produced, with its virtual time
    snapshots: list[tuple[int, list[int]]]  # recorded playout snapshots (time, values)
    caller_audio: list[tuple[int, bytes]]
    statistics: dict
    end_ns: int = 0  # the last entry's time: the call (or its record) ended there; nothing plays after it
    audio_format: str = "pcmu"  # the law of the call's frames (the header's audio_format: "pcma" for an A-law call)


def controller_from_header(header: dict[str, Any]) -> CallController:
    make_flow = FLOWS.get(header.get("flow", "scripted"))
    if make_flow is None:
        raise RecordError(f"unknown flow {header.get('flow')!r}")
    flow = make_flow(**header.get("flow_args", {}))
    config = ControllerConfig.from_dict(header.get("config", {}))
    return CallController(header["call_sid"], flow=flow, config=config, naming=header.get("naming", "ga"),
                          first_tag=int(header.get("first_tag", 1)), audio_format=header.get("audio_format", "pcmu"))


def driver_from_header(header: dict[str, Any]) -> Driver:
    """The driver the record's header describes, fresh (``control`` missing: a turns record)."""
    control = header.get("control", "turns")
    if control == "turns":
        return controller_from_header(header)
    if control == "spine":
        args = header.get("args", {})
        if not isinstance(args, dict):
            raise RecordError("spine header: args is not an object")
        failure = header.get("failure")
        return SpineDriver(header["call_sid"], naming=header.get("naming", "ga"), first_tag=int(header.get("first_tag", 1)),
                           failure=failure if isinstance(failure, dict) else None, **args)
    if control == "gemini":
        from voicecore.gemini.driver import driver_from_header as gemini_driver_from_header
        return gemini_driver_from_header(header)
    raise RecordError(f"unknown control {control!r}")


def rebuild(driver: Driver, entries: list[dict[str, Any]]) -> Driver:
    """Feed every recorded input to ``driver`` (its actions dropped): the state the call's driver had when
    the record ends. A model worker that takes over a call rebuilds its driver so from the part file the
    dead worker left (flow position, conversation, tags, timers), instead of starting the call over."""
    for entry in entries:
        if entry["k"] in INPUT_KINDS:
            _feed(driver, entry, caller_frames(entry) if entry["k"] == "audio" else b"")
    return driver


def driver_for_record(directory: str | Path, header: dict[str, Any], depth: int = 0) -> Driver:
    """The driver a record starts from: fresh from its header, or, for a record a worker began by taking
    over a call (``resumed_from``: the record it continued, in the same directory), rebuilt from that one."""
    predecessor = header.get("resumed_from")
    if not predecessor:
        return driver_from_header(header)
    if depth > 32 or "/" in str(predecessor) or str(predecessor).startswith("."):
        raise RecordError(f"resumed_from {predecessor!r}: not a record name in this directory (or too long a chain)")
    path = Path(directory) / str(predecessor)
    try:
        before, entries, _complete = load_record(path)
    except FileNotFoundError:
        raise RecordError(f"resumed_from {predecessor}: the record it continues is not in {directory}") from None
    return rebuild(driver_for_record(directory, before, depth + 1), entries)


def caller_frames(entry: dict[str, Any]) -> bytes:
    """An ``audio`` entry's frames: as recorded, or ``n`` frames of silence when the record kept only
    their timing (what the frames hold is the model's business: no driver decides on it)."""
    if "ulaw" in entry:
        return binascii.a2b_base64(entry["ulaw"])
    return bytes([MU_LAW_SILENCE]) * (int(entry["n"]) * timing.FRAME_BYTES)


def _feed(driver: Driver, entry: dict[str, Any], audio: bytes) -> list[Action]:
    """The driver's actions for one recorded input, as a record holds them (``audio``: an ``audio``
    entry's frames; the ``SendToModel`` that forwards them is not recorded, so it is not compared)."""
    kind, t = entry["k"], entry["t"]
    if kind == "reopen":
        return driver.reopen(t, True) if entry.get("reattached") else driver.reopen(t)
    if kind == "lost":
        return driver.on_model_lost(t, entry.get("reason", ""), bool(entry.get("fatal", False)))
    if kind == "start":
        return driver.start(t, entry["opening"]) if entry.get("opening") else driver.start(t)
    if kind == "resume":
        return driver.resume(t, bool(entry.get("cut", False)), entry.get("restored"))
    if kind == "model":
        return driver.on_model_event(entry["text"], t, playout_from(entry["p"]))
    if kind == "audio":
        return driver.on_caller_audio(audio, t)[forwarding_actions(audio):]
    if kind == "dtmf":
        return driver.on_dtmf(entry["digit"], t)
    if kind == "tick":
        return driver.on_tick(t, playout_from(entry["p"]))
    if kind == "verdict":
        return driver.on_verdict(int(entry["tag"]), int(entry["frames"]), bool(entry["rejected"]), t, playout_from(entry["p"]),
                                 entry.get("reason", ""), entry.get("citations", ""))
    if kind == "snippets":
        return driver.on_snippets(int(entry["req"]), list(entry["snippets"]), t)
    if kind == "tool":
        return driver.on_tool_result(str(entry["call_id"]), bool(entry["ok"]), str(entry["output"]), t)
    if kind == "tones":
        return driver.on_tones(str(entry["call_id"]), str(entry["digits"]), t)
    return driver.on_carrier_stop(t)


def recorded_action(action: dict[str, Any], call_sid: str) -> dict[str, Any]:
    """A recorded action as this version would produce it: a RunTool whose key is the call-free key of
    older records gets the key of the same action of ``call_sid``; everything else as recorded."""
    if action.get("type") != "RunTool":
        return action
    name, arguments = str(action.get("name", "")), str(action.get("arguments", ""))
    if action.get("key") != agent_actions.call_free_idempotency_key(name, arguments):
        return action
    return {**action, "key": agent_actions.idempotency_key(call_sid, name, arguments)}


def _as_is(action: dict[str, Any]) -> dict[str, Any]:
    return action


@dataclasses.dataclass(slots=True)
class _Step:
    """One recorded input, fed to the driver, and the actions the record says it returned."""

    entry: dict[str, Any]
    got: list[dict]
    expected: list[dict]


class Replayer(RecordConsumer):
    """The replay as a consumer of the one walk over a record (voicecore/call/record_reader.py): every recorded
    input is fed to ``driver`` as it is read, and its actions are compared with the ``out`` entries that follow
    it once the next input (or the record's end, ``result``) closes them. Reads no model event itself: the
    driver parses the recorded text as it did live."""

    __slots__ = ("driver", "call_sid", "stop_at_divergence", "divergence", "timed", "snapshots", "caller", "inputs",
                 "outputs", "step", "privacy")

    def __init__(self, driver: Driver, call_sid: str, stop_at_divergence: bool = True,
                 privacy: RecordPrivacy | None = None) -> None:
        """``privacy``: the storage tier the record was written under; the replayed actions are compared in
        the form it stores them (a redacted record holds its actions redacted)."""
        super().__init__()
        self.privacy = privacy if privacy is not None and privacy.changes_text else None
        self.driver = driver
        self.call_sid = call_sid
        self.stop_at_divergence = stop_at_divergence
        self.divergence: Divergence | None = None
        self.timed: list[tuple[int, Action]] = []
        self.snapshots: list[tuple[int, list[int]]] = []
        self.caller: list[tuple[int, bytes]] = []
        self.inputs = self.outputs = 0
        self.step: _Step | None = None  # the input whose recorded actions are being read

    def input_handlers(self) -> Mapping[str, InputHandler]:
        return {ANY: self._input}

    def action_handlers(self) -> Mapping[str, ActionHandler]:
        return {ANY: self._recorded_action}

    @property
    def stopped(self) -> bool:
        return self.divergence is not None and self.stop_at_divergence

    def _input(self, entry: dict[str, Any], at_ms: int) -> None:
        self._close(last=False)
        if entry["k"] not in INPUT_KINDS or self.stopped:
            return  # not an input (its actions, if any follow, belong to none), or the replay stopped
        self.inputs += 1
        if "p" in entry:
            self.snapshots.append((entry["t"], entry["p"]))
        audio = b""
        if entry["k"] == "audio":
            audio = caller_frames(entry)
            if "ulaw" in entry:
                self.caller.append((entry["t"], audio))
        actions = _feed(self.driver, entry, audio)
        self.outputs += len(actions)
        self.timed.extend((entry["t"], a) for a in actions)
        stored = self.privacy.action if self.privacy is not None else _as_is
        self.step = _Step(entry, [stored(action_to_dict(a)) for a in actions] if self.divergence is None else [], [])

    def _recorded_action(self, action: dict[str, Any], at_ms: int) -> None:
        if self.step is not None:
            self.step.expected.append(recorded_action(action, self.call_sid))

    def _close(self, last: bool, complete: bool = True) -> None:
        """Compare the open step's actions; ``last``: no input came after it (with ``complete`` False, its
        recorded actions may have been cut off with the record: a prefix of the replayed ones is no divergence)."""
        step, self.step = self.step, None
        if step is None or self.divergence is not None:
            return
        got, expected = step.got, step.expected
        cut_short = last and not complete and got[:len(expected)] == expected
        if got != expected and not cut_short:
            k = next((j for j in range(min(len(got), len(expected))) if got[j] != expected[j]), min(len(got), len(expected)))
            self.divergence = Divergence(step.entry["t"], step.entry["k"], k, expected[k] if k < len(expected) else None,
                                         got[k] if k < len(got) else None)

    def result(self, header: dict[str, Any], complete: bool = True) -> ReplayResult:
        """The replay once the whole record was read (``complete`` False: it was cut short)."""
        self._close(last=True, complete=complete)
        reader = self.reader
        t0 = reader.t0 if reader is not None else None
        end_ns = reader.last_t if reader is not None and t0 is not None else 0
        return ReplayResult(self.divergence is None, self.divergence, self.inputs, self.outputs,
                            end_ns - t0 if t0 is not None else 0, self.timed, self.snapshots, self.caller,
                            self.driver.statistics(), end_ns, _audio_format(header))


def replay(header: dict[str, Any], entries: list[dict[str, Any]], stop_at_divergence: bool = True,
           complete: bool = True, driver: Driver | None = None) -> ReplayResult:
    """Feed every recorded input through a fresh driver (or ``driver``: one rebuilt for a record that
    continues another, driver_for_record); compare outputs input by input (``Replayer``).
    ``complete`` False (the record was cut short): the last input's recorded actions may be a prefix."""
    replayer = Replayer(driver if driver is not None else driver_from_header(header), str(header.get("call_sid", "")),
                        stop_at_divergence, RecordPrivacy.from_header(header))
    read_entries(RecordReader(replayer), entries)
    return replayer.result(header, complete)


def _audio_format(header: dict[str, Any]) -> str:
    """The law of a record's frames: a turns header names it at top level, a spine header among its core's args."""
    args = header.get("args")
    fmt = header.get("audio_format") or (args.get("audio_format") if isinstance(args, dict) else None) or PCMU
    if fmt not in (PCMU, PCMA):
        raise RecordError(f"unknown audio_format {fmt!r}")
    return fmt


# --- what the caller heard, placed in time -------------------------------------------------------------
def agent_track(result: ReplayResult, origin_ns: int) -> bytes:
    """The agent's audio as the caller heard it: frames placed at the time the carrier played them.

    Play times come from the recorded playout snapshots: the first snapshot whose sent position covers
    a frame says the carrier's buffer runs dry at ``carrier_empty_at_ns``, so the frames it holds play
    back to back before that (frame ``k`` of ``sent`` starts at ``carrier_empty_at - (sent - k) * 20 ms``).
    Frames with no such snapshot are placed right after the previous frame (at the earliest when
    written); no frame starts before the previous one ended. A CancelTag (the pacer's ``clear``)
    silences every frame of its tag that had not started playing at that time.
    """
    frame_ms = timing.FRAME_MS
    frame_ns = frame_ms * 1_000_000
    released: dict[tuple[int, int], int] = {}
    for t, p in result.snapshots:
        tag, sent, empty_at = p[3], p[4], p[5]
        for k in range(sent - 1, -1, -1):
            if (tag, k) in released:
                break
            released[(tag, k)] = empty_at - (sent - k) * frame_ns if empty_at else t
    cancelled: dict[int, int] = {}
    for t, action in result.timed_actions:
        if isinstance(action, CancelTag):
            cancelled.setdefault(action.tag, t)
    placed: list[tuple[int, bytes]] = []
    cursor = origin_ns
    for t, action in result.timed_actions:
        if isinstance(action, WriteFrames):
            for k in range(len(action.audio) // timing.FRAME_BYTES):
                at = released.get((action.tag, action.first_index + k))
                at = max(cursor, t) if at is None else max(cursor, at)
                cut = cancelled.get(action.tag)
                if (cut is not None and at >= cut) or (result.end_ns and at >= result.end_ns):
                    continue
                placed.append((at, action.audio[k * timing.FRAME_BYTES:(k + 1) * timing.FRAME_BYTES]))
                cursor = at + frame_ns
    return to_ulaw(_lay(placed, origin_ns, result.audio_format), result.audio_format)


def caller_track(result: ReplayResult, origin_ns: int) -> bytes:
    """The caller's audio as recorded, placed in time; mu-law whatever the call's law (the WAV reads mu-law)."""
    return to_ulaw(_lay(result.caller_audio, origin_ns, result.audio_format), result.audio_format)


def _lay(pieces: list[tuple[int, bytes]], origin_ns: int, audio_format: str = PCMU) -> bytes:
    if not pieces:
        return b""
    end = max((t - origin_ns) // 1_000_000 * timing.BYTES_PER_MS + len(b) for t, b in pieces)
    track = bytearray([silence_byte(audio_format)]) * max(0, end)
    for t, b in pieces:
        at = max(0, (t - origin_ns) // 1_000_000 * timing.BYTES_PER_MS)
        track[at:at + len(b)] = b
    return bytes(track)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voicecore replay", description="Replay a recorded call through the cores.")
    parser.add_argument("file")
    parser.add_argument("--wav", metavar="OUT", help="write the call as a stereo WAV (caller left, agent right)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        header, entries, complete = load_record(args.file)
        wall_start = time.perf_counter()
        result = replay(header, entries, complete=complete, driver=driver_for_record(Path(args.file).parent, header))
        wall_s = time.perf_counter() - wall_start
    except (RecordError, OSError, KeyError, TypeError, ValueError) as exc:
        print(f"replay: {args.file}: {exc}", file=sys.stderr)
        return 2
    speed = (result.call_ns / 1e9) / wall_s if wall_s > 0 else float("inf")
    if args.wav and entries:
        origin = entries[0]["t"]
        write_stereo_wav(Path(args.wav), caller_track(result, origin), agent_track(result, origin))
    report = {
        "control": header.get("control", "turns"),
        "identical": result.identical,
        "complete": complete,
        "inputs": result.inputs,
        "outputs": result.outputs,
        "call_s": round(result.call_ns / 1e9, 3),
        "replay_speed_x": round(speed, 1),
        "divergence": dataclasses.asdict(result.divergence) if result.divergence else None,
    }
    if not complete:
        report["note"] = "record incomplete (a part file or a cut-short last line): replayed the complete lines it has"
    if args.json:
        print(json.dumps(report))
        return 0 if result.identical else 1
    if not complete:
        print(f"incomplete: {report['note']}")
    if result.identical:
        print(f"identical: {result.inputs} inputs, {result.outputs} actions, {report['call_s']} s of call "
              f"replayed at {report['replay_speed_x']}x real time")
    else:
        d = result.divergence
        assert d is not None
        print(f"diverged at t={d.t_ns} ns (input {d.input_kind}, action {d.index})\n  expected: {d.expected}\n  got:      {d.got}")
    return 0 if result.identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
