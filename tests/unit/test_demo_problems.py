"""The demo names why it failed: a traceback in any stack or simulator process is a problem by name."""

from __future__ import annotations

import asyncio

from voicecore.demo import LoopExceptions, tracebacks
from voicecore.sim.carrier_core import CarrierCall

LOG = """2026-11-29 10:00:01 model INFO call CA1 started
Traceback (most recent call last):
  File "/x/workers/model/main.py", line 10, in run
    step()
AttributeError: 'CarrierCall' object has no attribute 'stop_messages'
pacer | Traceback (most recent call last):
pacer |   File "/x/workers/pacer/main.py", line 3, in tick
pacer |     raise ValueError("bad tag")
pacer | ValueError: bad tag
"""


def test_each_traceback_in_a_log_is_one_problem_naming_its_exception():
    found = tracebacks(LOG, "a stack process (its log)")
    assert found == [
        "traceback in a stack process (its log): AttributeError: 'CarrierCall' object has no attribute 'stop_messages'",
        "traceback in a stack process (its log): ValueError: bad tag",
    ]
    assert tracebacks("all well\n", "x") == []


def test_an_unhandled_exception_in_the_demo_loop_is_kept():
    handler = LoopExceptions()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(handler)
        loop.call_soon(lambda: 1 / 0)
        await asyncio.sleep(0.01)

    asyncio.run(main())
    assert len(handler.problems) == 1 and "ZeroDivisionError" in handler.problems[0]


def test_the_twilio_adapter_ends_a_stream_the_way_every_adapter_does():
    # The carrier REST API ends a call through stop_messages (voicecore/sim/carrier.py end_by_rest): the
    # Twilio adapter lacked it, so an agent's hang-up raised in the simulator and the call ran on.
    call = CarrierCall("CA1", "MZ1", "AC1", "token", b"", 4, play_phase_ms=0.0)
    call.opening_messages()
    messages = call.stop_messages(100.0)
    assert len(messages) == 1 and '"event": "stop"' in messages[0]
    assert call.stopped_at_ms == 100.0
