"""The model worker pumps its calls between the model's messages when a burst of them holds its loop.

One asyncio iteration hands every ready model socket all it has buffered: when 50 answers stream at once,
faster than real time, that is hundreds of messages, and the loop's own pump (a caller's audio to the model
every 100 ms) waited 150-700 ms behind them; a caller who began to talk over the agent meanwhile was heard that
late, and the agent talked on. Between messages, a pump now runs once the last one is PUMP_HELD_NS old.
"""

import collections
import types

from picows import WSMsgType

from workers.model import main as model_main


class Clock:
    def __init__(self) -> None:
        self.now_ns = 1_000_000_000

    def monotonic_ns(self) -> int:
        return self.now_ns


class Call:
    """A call of the worker: what was pumped, and when."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.flushed: list[int] = []
        self.pumped: list[int] = []

    def flush_pending(self) -> None:
        self.flushed.append(self.clock.now_ns)

    def pump_inbound(self, now_ns: int) -> None:
        self.pumped.append(now_ns)


class Session:
    """The socket's session: each message takes ``cost_ns`` to handle."""

    def __init__(self, worker, clock: Clock, cost_ns: int) -> None:
        self.worker, self.clock, self.cost_ns = worker, clock, cost_ns
        self.handled: list[str] = []

    def socket_text(self, transport, text: str) -> None:
        self.handled.append(text)
        self.clock.now_ns += self.cost_ns


class Frame:
    msg_type = WSMsgType.TEXT
    fin = True

    def __init__(self, text: str) -> None:
        self.text = text

    def get_payload_as_bytes(self) -> bytes:
        return self.text.encode()


def worker_with_calls(clock: Clock, calls: int):
    worker = types.SimpleNamespace(calls={slot: Call(clock) for slot in range(calls)}, arena=object(),
                                   counters=collections.Counter(), calls_pumped_ns=clock.now_ns)
    worker.pump_calls = types.MethodType(model_main.ModelWorker.pump_calls, worker)
    worker.pump_if_held = types.MethodType(model_main.ModelWorker.pump_if_held, worker)
    return worker


def burst(monkeypatch, cost_ns: int, messages: int, calls: int = 3):
    clock = Clock()
    monkeypatch.setattr(model_main.time, "monotonic_ns", clock.monotonic_ns)
    worker = worker_with_calls(clock, calls)
    session = Session(worker, clock, cost_ns)
    socket = model_main.ModelSocket(session)
    for n in range(messages):
        socket.on_ws_frame(None, Frame(f'{{"n":{n}}}'))
    return worker, session


def test_a_burst_that_holds_the_loop_pumps_every_call_between_messages(monkeypatch):
    # 100 messages of 2 ms each: 200 ms in one iteration of the loop
    worker, session = burst(monkeypatch, cost_ns=2_000_000, messages=100)
    assert len(session.handled) == 100
    start = 1_000_000_000
    for call in worker.calls.values():
        assert call.pumped == call.flushed  # every pump moves waiting frames to the ring first
        gaps = [b - a for a, b in zip([start] + call.pumped, call.pumped + [start + 200_000_000])]
        assert len(call.pumped) == 200_000_000 // model_main.PUMP_HELD_NS
        assert max(gaps) <= model_main.PUMP_HELD_NS  # no call's caller waits longer than that behind the burst
    assert worker.counters["pumps_in_model_bursts"] == len(call.pumped)


def test_messages_that_hold_the_loop_briefly_leave_the_pumping_to_the_loop(monkeypatch):
    # 30 messages of 1 ms: the loop's own pump (every 20 ms) is due after them, none runs in between
    worker, session = burst(monkeypatch, cost_ns=1_000_000, messages=30)
    assert len(session.handled) == 30
    assert all(not call.pumped for call in worker.calls.values())
    assert worker.counters["pumps_in_model_bursts"] == 0


def test_no_pump_while_no_arena_is_attached(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(model_main.time, "monotonic_ns", clock.monotonic_ns)
    worker = worker_with_calls(clock, 2)
    worker.arena = None  # the gateway's arena is gone: its calls' rings with it
    clock.now_ns += 10 * model_main.PUMP_HELD_NS
    worker.pump_if_held()
    assert all(not call.pumped for call in worker.calls.values())
