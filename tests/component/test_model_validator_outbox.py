"""The model worker's gate messages to the validator (workers/model/main.py ``to_validator``): those of one turn
of its event loop leave as one bus message, in order, on a real ipc socket; with no loop running each goes at
once (nothing would flush it later); ``flush_validator`` sends what waits (the worker calls it before its bus
closes)."""

from __future__ import annotations

import asyncio
import dataclasses

import zmq

from voicecore.agent.load import load_configured_agent
from voicecore.bus import messages as m
from voicecore.bus.transport import VALIDATOR_INBOX, Bus
from voicecore.config import load_config
from workers.model.main import ModelWorker


def worker_and_inbox(tmp_path) -> tuple[ModelWorker, Bus, zmq.Socket]:
    (tmp_path / "run").mkdir(mode=0o700)
    config = dataclasses.replace(load_config({}), runtime_dir=str(tmp_path / "run"))
    validator = Bus(tmp_path / "run")
    inbox = validator.bind(zmq.PULL, VALIDATOR_INBOX)
    return ModelWorker(config, load_configured_agent(config, {})), validator, inbox


def raw_messages(inbox: zmq.Socket, want: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < want and inbox.poll(2000):
        got.append(inbox.recv())
    while inbox.poll(100):  # nothing more than wanted
        got.append(inbox.recv())
    return got


def answer(tag: int) -> list:
    return [m.GateOpen(1, 1, tag, "numbers", "", "en", ""), m.TranscriptDelta(1, 1, tag, "Basic", 15),
            m.TranscriptDelta(1, 1, tag, " costs", 36), m.TranscriptDone(1, 1, tag, "", 36)]


def test_one_turn_of_the_loop_sends_its_gate_messages_as_one_batch_in_order(tmp_path):
    worker, validator, inbox = worker_and_inbox(tmp_path)
    sent = answer(7) + answer(8)

    async def main() -> None:
        for message in sent:
            worker.to_validator(message)
        assert len(worker.validator_outbox) == len(sent)  # nothing sent yet
        await asyncio.sleep(0)
        assert worker.validator_outbox == []

    try:
        asyncio.run(main())
        got = raw_messages(inbox, 1)
        assert len(got) == 1 and m.decode_all(got[0]) == sent
    finally:
        worker.bus.close()
        worker.follower.close()
        validator.close()


def test_without_a_running_loop_each_goes_at_once_and_a_flush_sends_what_waits(tmp_path):
    worker, validator, inbox = worker_and_inbox(tmp_path)
    try:
        worker.to_validator(answer(3)[0])
        got = raw_messages(inbox, 1)
        assert [m.decode(raw) for raw in got] == [answer(3)[0]]
        worker.validator_outbox.append(m.encode(answer(3)[1]))  # queued by a loop that then stopped
        worker.flush_validator()
        assert [m.decode(raw) for raw in raw_messages(inbox, 1)] == [answer(3)[1]]
    finally:
        worker.bus.close()
        worker.follower.close()
        validator.close()
