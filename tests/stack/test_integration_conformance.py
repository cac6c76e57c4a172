"""Conformance with the vendor's own types, end to end: every client event the stack sent and every server
event the model simulator sent, in every mode, validated against the official `openai` package's GA Realtime
types with no field those types do not declare.

The modes are real runs: `voicecore demo` with the spine (the default agent: greeting, answers, barge-in
cancels and truncates, overlapping responses), with each shipped example agent under the turn-taking
controller (the receptionist: tools with confirmations and a transfer; the shop assistant: Swedish, a Python
tool, a repeated call; the interview: context resets and task messages), and a stack whose model sessions
drop mid-call (the conversation restored into the new session). What went over the wire is read back from
the calls' records (every client event the driver sent, every server event it received); the caller's
audio appends are not recorded and are checked through their builder (tests/unit/test_realtime_events.py).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from demo_run import example_demo
from stacks import TEST_SIM, start_stack
from waiting import wait_until
from pydantic import BaseModel, TypeAdapter, ValidationError

from voicecore.demo import demo_script
from voicecore.sim.carrier import place_call

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from openai.types.realtime.realtime_client_event import RealtimeClientEvent
    from openai.types.realtime.realtime_server_event import RealtimeServerEvent

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLIENT = TypeAdapter(RealtimeClientEvent)
SERVER = TypeAdapter(RealtimeServerEvent)
# Keys the vendor's own session and response objects carry that the SDK's server types leave undeclared
# (seen in real session.created traffic); nothing else may be extra.
SERVER_TOLERATED = {"object", "id", "expires_at", "obfuscation"}
SPINE_DEMO = ["--calls", "2", "--seconds", "20", "--overlap-probability", "0.5"]
# the shipped examples' demos (3 calls x 60 s each), run once per session with tests/e2e/test_examples_demo.py
EXAMPLES = ("receptionist", "shop-assistant", "interview")
DEMO_TIMEOUT_S = 300


def extras(model: Any, path: str = "") -> list[str]:
    """Keys the SDK type does not declare, anywhere in the validated model (its models allow extra keys,
    so validation alone would let a misspelt one through)."""
    found: list[str] = []
    if isinstance(model, BaseModel):
        found += [f"{path}.{key}" for key in (model.model_extra or {})]
        for name in type(model).model_fields:
            found += extras(getattr(model, name), f"{path}.{name}")
    elif isinstance(model, (list, tuple)):
        for i, value in enumerate(model):
            found += extras(value, f"{path}[{i}]")
    return found


def run_spine_demo(record_dir: Path) -> tuple[int, str]:
    command = [sys.executable, "-m", "voicecore.cli", "demo", "--json", "--record-dir", str(record_dir), *SPINE_DEMO]
    done = subprocess.run(command, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S, cwd=ROOT)
    return done.returncode, done.stderr[-4000:]


def restored_call() -> Path:
    """One call whose first model session the vendor drops 14 s in (after a question, its answer and a
    barge-in): the next session gets the conversation so far.
    Returns the records' directory."""
    running = start_stack(call_control="turns", max_calls=2)
    try:
        async def call():
            async with running.model_sim(dataclasses.replace(TEST_SIM, drop_after_ms=14_000)) as sim:
                result = await place_call(running.config.base_url, running.config.twilio_auth_token, demo_script(24))
                return sim, result

        sim, result = asyncio.run(call())
        assert len(sim.by_call(result.call_sid)) == 2, running.log_tail()
        # The model worker writes the record once the call has ended: wait for it before stopping the stack
        # (CI read an empty directory once, the stack stopped before the record was written).
        record = Path(running.config.record_dir) / f"{result.call_sid}.jsonl"
        wait_until(lambda: record.exists(), 30, f"the call's record {record.name}", detail=running.log_tail)
    finally:
        running.stop()
    return Path(running.config.record_dir)


def wire_texts(directory: Path) -> tuple[list[str], list[str]]:
    """(client events sent, server events received) of every record in ``directory``."""
    client: list[str] = []
    server: list[str] = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if entry.get("k") == "out" and entry["a"].get("type") == "SendToModel":
                client.append(entry["a"]["text"])
            elif entry.get("k") == "model":
                server.append(entry["text"])
    return client, server


@pytest.fixture(scope="module")
def wire(tmp_path_factory) -> dict[str, tuple[list[str], list[str]]]:
    # A demo's own checks (its report's ok) are tests/e2e/test_examples_demo.py's; here its records are the point.
    # The examples' demos one at a time (their reports' real-time figures are asserted there), then the spine's
    # demo and the restored call side by side: two small stacks at a time, the machine is shared.
    runs = {mode: example_demo(mode, tmp_path_factory) for mode in EXAMPLES}
    for mode, run in runs.items():
        assert run.returncode in (0, 1) and list(run.record_dir.glob("*.jsonl")), f"{mode}: {run.stderr}"
    spine_records = tmp_path_factory.mktemp("conformance-spine-records")
    with ThreadPoolExecutor(2) as pool:
        spine = pool.submit(run_spine_demo, spine_records)
        restored = pool.submit(restored_call)
        code, stderr = spine.result()
        restore_records = restored.result()
    assert code in (0, 1) and list(spine_records.glob("*.jsonl")), f"spine: {stderr}"
    wire = {"spine": wire_texts(spine_records)}
    wire.update({mode: wire_texts(run.record_dir) for mode, run in runs.items()})
    wire["restore"] = wire_texts(restore_records)
    return wire


def validate(adapter: TypeAdapter, text: str, tolerated: set[str]) -> str:
    try:
        model = adapter.validate_python(json.loads(text))
    except ValidationError as exc:
        pytest.fail(f"does not validate against the openai types: {text[:300]}\n{str(exc)[:1500]}")
    unknown = [key for key in extras(model) if key.rsplit(".", 1)[-1] not in tolerated]
    assert unknown == [], (unknown, text[:300])
    return model.type  # type: ignore[attr-defined]


def test_every_client_event_of_every_mode_is_the_vendors_type_with_no_unknown_field(wire):
    counts: dict[str, collections.Counter] = {}
    for mode, (client, _server) in wire.items():
        counts[mode] = collections.Counter(validate(CLIENT, text, set()) for text in client)
        assert counts[mode]["session.update"] >= 1 and counts[mode]["response.create"] >= 1, (mode, counts[mode])
    total = sum(counts.values(), collections.Counter())
    # what the modes must have exercised between them
    assert {"session.update", "response.create", "response.cancel", "conversation.item.truncate",
            "conversation.item.create"} <= set(total), total
    items = collections.Counter(json.loads(t)["item"]["type"] + ":" + str(json.loads(t)["item"].get("role", ""))
                                for client, _ in wire.values() for t in client
                                if json.loads(t)["type"] == "conversation.item.create")
    assert items["function_call_output:"] >= 3, items  # the examples' tool results
    assert counts["restore"]["conversation.item.create"] >= 2, counts["restore"]  # the restored conversation
    print("FIGURE client events checked by type:", dict(sorted(total.items())), "items:", dict(sorted(items.items())))
    print("FIGURE client events checked by mode:", {mode: sum(c.values()) for mode, c in counts.items()})


def test_every_server_event_the_simulator_sent_is_the_vendors_type(wire):
    total: collections.Counter = collections.Counter()
    for mode, (_client, server) in wire.items():
        total.update(validate(SERVER, text, SERVER_TOLERATED) for text in server)
    assert {"session.created", "session.updated", "response.created", "response.output_audio.delta",
            "response.done", "input_audio_buffer.speech_started", "conversation.item.truncated",
            "response.function_call_arguments.done"} <= set(total), total
    print("FIGURE server events checked by type:", dict(sorted(total.items())))
