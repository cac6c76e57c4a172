"""The text channel's shell: a ChatSession (voicecore/chat/session.py) driven against the model simulator or
the vendor's Realtime API, with the agent's tools run for real.

Owns the loop of one conversation: the session's texts to the model, the model's events back, the tools the
controller asks for (Python tools in a ToolPool's processes, webhooks over HTTP, as the model worker runs
them), and the clock. Against the simulator both cores are sans-I/O (voicecore/sim/model ModelSession
speaks the vendor's wire texts exactly), so the conversation runs on a virtual clock: what the simulator
schedules happens at once, in order, and a turn's latency is the simulator's (its first-delta latency and
text pacing) plus what the tools really took. Against a vendor (``VendorModel``: a WebSocket to the
configured realtime URL, as the model worker dials it) the clock is the real one and latency is what the
caller would wait. The validator's core gives the gate's verdicts in process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

from voicecore.agent import tools as agent_tools
from voicecore.agent.settings import agent_for_config
from voicecore.agent.spec import AgentSpec, PythonTool
from voicecore.agent.tool_pool import ToolPool
from voicecore.call.build import controller_config
from voicecore.chat.session import ChatEvent, ChatSession
from voicecore.config import Config, load_config
from voicecore.realtime import events as rt
from voicecore.realtime.events import detect_provider
from voicecore.realtime.transport import Endpoint, endpoint
from voicecore.sim.model import ModelSession, SimConfig, SimTurn
from voicecore.sim.tool_server import Route
from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir
from workers.validator.core import ValidatorCore

MS = 1_000_000
TICK_MS = 100  # with nothing scheduled, the controller's timers are checked this often (virtual time)
TURN_LIMIT_MS = 60_000  # a turn that has not settled after this much (virtual) time is given up


def knowledge_for(agent: AgentSpec) -> KnowledgeBase | None:
    if not agent.knowledge_dir:
        return None
    return KnowledgeBase.from_documents(load_knowledge_dir(agent.knowledge_dir))


def tool_pool_for(agent: AgentSpec, processes: int = 1, per_call: int = 1) -> ToolPool | None:
    """The processes the agent's Python tools run in (one conversation at a time needs one); None without any."""
    entries = [fn.tool.entry for fn in agent.flow.functions.values() if isinstance(fn.tool, PythonTool)]
    return ToolPool(agent.directory, entries, processes=processes, per_call=per_call) if entries else None


class SimulatedModel:
    """The model simulator's session, fed and read in process on the conversation's clock."""

    def __init__(self, rules: Sequence[SimTurn], naming: str, seed: int = 1) -> None:
        self.session = ModelSession(SimConfig(naming=naming, turns=tuple(rules)), 0, seed, naming=naming)

    def send(self, text: str, now_ms: int) -> list[str]:
        self.session.receive_client_event(text, now_ms)
        return self.session.events_to_send()

    def due_ms(self) -> int | None:
        return self.session.next_wakeup_ms()

    def advance(self, now_ms: int) -> list[str]:
        self.session.advance(now_ms)
        return self.session.events_to_send()

    @property
    def responding(self) -> bool:
        return self.session.active_response_id is not None


class _VendorSocket(WSListener):
    def __init__(self, inbox: asyncio.Queue) -> None:
        self.inbox = inbox

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type is WSMsgType.TEXT:
            self.inbox.put_nowait(frame.get_payload_as_bytes().decode("utf-8", errors="replace"))
        elif frame.msg_type is WSMsgType.CLOSE:
            code = frame.get_close_code()
            self.inbox.put_nowait(None)
            if not transport.is_close_frame_sent:
                transport.send_close(WSCloseCode.OK)
            transport.disconnect()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.inbox.put_nowait(None)


class VendorModel:
    """One Realtime session at the vendor (or any server speaking its protocol), on the real clock."""

    def __init__(self, target: Endpoint) -> None:
        self.target = target
        self.inbox: asyncio.Queue[str | None] = asyncio.Queue()
        self.transport: WSTransport | None = None
        self.active: set[str] = set()  # responses created and not done
        self.closed = False

    async def open(self, timeout_s: float = 10.0) -> None:
        self.transport, _ = await ws_connect(lambda: _VendorSocket(self.inbox), self.target.url,
                                             extra_headers=self.target.headers, proxy=self.target.proxy,
                                             websocket_handshake_timeout=timeout_s,
                                             logger_name=logging.getLogger("voicecore.chat.vendor"))

    def send(self, text: str) -> None:
        if self.transport is not None and not self.closed:
            self.transport.send(WSMsgType.TEXT, text.encode())

    def seen(self, text: str) -> None:
        event = rt.parse_server_event(text)
        if isinstance(event, rt.ResponseCreated):
            self.active.add(event.response_id)
        elif isinstance(event, rt.ResponseDone):
            self.active.discard(event.response_id)

    @property
    def responding(self) -> bool:
        return bool(self.active)

    async def close(self) -> None:
        self.closed = True
        transport = self.transport
        if transport is not None and not transport.is_disconnected:
            if not transport.is_close_frame_sent:
                transport.send_close(WSCloseCode.OK)
            transport.disconnect()
            await transport.wait_disconnected()


@dataclasses.dataclass(slots=True)
class Turn:
    """One caller message and what followed it until the agent was done."""

    caller: str
    events: list[ChatEvent]
    latency_ms: int | None  # caller message -> the first line the agent said; None: it said nothing
    settled: bool = True


class Conversation:
    """One conversation against the simulator on a virtual clock (module docstring)."""

    def __init__(self, agent: AgentSpec, rules: Sequence[SimTurn] = (), *, config: Config | None = None,
                 session_id: str = "CHAT0001", naming: str = "ga", pool: ToolPool | None = None,
                 knowledge: KnowledgeBase | None = None, environ: Mapping[str, str] | None = None,
                 on_event=None, vendor: VendorModel | None = None) -> None:
        config = config or load_config({}, None)
        agent = agent_for_config(agent, config)
        self.agent = agent
        self.knowledge = knowledge if knowledge is not None else knowledge_for(agent)
        self.session = ChatSession(agent, session_id, controller_config(config, agent), ValidatorCore(self.knowledge),
                                   naming=naming, knowledge=self.knowledge)
        self.model = SimulatedModel(rules, naming)
        self.vendor = vendor  # set: the conversation is with it, on the real clock
        self.started_s = time.monotonic()
        self.pool = pool
        self.environ = environ if environ is not None else os.environ
        self.now_ms = 0
        self.shown = 0
        self.on_event = on_event
        self.running: dict[asyncio.Task, tuple[str, int]] = {}

    @property
    def ended(self) -> str:
        return self.session.ended

    async def start(self) -> Turn:
        if self.vendor is not None:
            await self.vendor.open()
            self.now_ms = self._clock()
        self.session.start(self.now_ms * MS)
        return await (self._settle_live("") if self.vendor is not None else self._settle(""))

    async def say(self, text: str) -> Turn:
        # the time the caller took to type passes on the virtual clock too (never backwards)
        self.now_ms = max(self.now_ms, self._clock())
        self.session.caller_says(text, self.now_ms * MS)
        return await (self._settle_live(text) if self.vendor is not None else self._settle(text))

    def _clock(self) -> int:
        return int((time.monotonic() - self.started_s) * 1000)

    async def close(self) -> None:
        for task in self.running:
            task.cancel()
        if self.running:
            await asyncio.gather(*self.running, return_exceptions=True)
        self.running.clear()
        if self.vendor is not None:
            await self.vendor.close()

    # ------------------------------------------------------------------------------------ the loop
    def _exchange(self) -> None:
        """The session's texts to the model and the model's answers back, until neither has more."""
        session = self.session
        while session.to_model:
            outgoing, session.to_model = session.to_model, []
            for text in outgoing:
                for event in self.model.send(text, self.now_ms):
                    session.model_event(event, self.now_ms * MS)

    def _start_tools(self) -> None:
        while self.session.tools:
            action = self.session.tools.pop(0)
            task = asyncio.get_running_loop().create_task(self._run_tool(action))
            self.running[task] = (action.call_id, self.now_ms)

    async def _run_tool(self, action) -> agent_tools.ToolResult:
        function = self.agent.flow.functions.get(action.name)
        if function is None:
            return agent_tools.ToolResult(False, agent_tools.error_output("unknown_function", "not declared"),
                                          "unknown_function", 0, 0)
        context = agent_tools.ToolContext(self.session.session_id, action.name, action.key)
        return await agent_tools.run_tool(function, action.arguments, context, self.environ, python=self.pool)

    async def _settle(self, caller: str) -> Turn:
        start_ms = self.now_ms
        first = len(self.session.events)
        deadline = start_ms + TURN_LIMIT_MS
        settled = True
        while True:
            self._exchange()
            self._start_tools()
            self._notify()
            if self.running:
                began = time.monotonic()
                done, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
                # the virtual clock moves on by what the tools really took
                self.now_ms = max(self.now_ms, max(self.running[t][1] for t in done) + int((time.monotonic() - began) * 1000))
                for task in done:
                    call_id, _ = self.running.pop(task)
                    result = task.result()
                    self.session.tool_result(call_id, result.ok, result.output, self.now_ms * MS)
                continue
            if not self.session.busy and not self.model.responding and not self.session.to_model:
                break
            if self.now_ms >= deadline or self.session.ended:
                settled = self.session.ended != ""
                break
            due = self.model.due_ms()
            if due is None:
                self.now_ms += TICK_MS  # nothing scheduled: the controller's timers decide
            elif due > self.now_ms:
                self.now_ms = min(due, self.now_ms + TICK_MS)
            for event in self.model.advance(self.now_ms):
                self.session.model_event(event, self.now_ms * MS)
            self.session.tick(self.now_ms * MS)
        self._notify()
        events = self.session.events[first:]
        said = [e for e in events if e.kind == "said"]
        latency = (said[0].at_ns // MS - start_ms) if said else None
        return Turn(caller, events, latency, settled)

    async def _settle_live(self, caller: str) -> Turn:
        """As _settle, with the vendor on the real clock: events as they arrive, timers every TICK_MS."""
        assert self.vendor is not None
        vendor, session = self.vendor, self.session
        start_ms = self.now_ms
        first = len(session.events)
        deadline = start_ms + TURN_LIMIT_MS
        settled = True
        while True:
            while session.to_model:
                outgoing, session.to_model = session.to_model, []
                for text in outgoing:
                    vendor.send(text)
            self._start_tools()
            self._notify()
            if not session.busy and not vendor.responding and not self.running and vendor.inbox.empty():
                break
            if self.now_ms >= deadline or session.ended or vendor.closed:
                settled = session.ended != ""
                break
            receive = asyncio.ensure_future(vendor.inbox.get())
            done, _ = await asyncio.wait({receive, *self.running}, timeout=TICK_MS / 1000,
                                         return_when=asyncio.FIRST_COMPLETED)
            self.now_ms = self._clock()
            texts: list[str | None] = []
            if receive in done:
                texts.append(receive.result())
                while not vendor.inbox.empty():
                    texts.append(vendor.inbox.get_nowait())
            else:
                receive.cancel()
            for text in texts:
                if text is None:
                    vendor.closed = True
                    session.model_lost("closed", self.now_ms * MS)
                    continue
                vendor.seen(text)
                session.model_event(text, self.now_ms * MS)
            for task in [t for t in done if t in self.running]:
                call_id, _ = self.running.pop(task)
                result = task.result()
                session.tool_result(call_id, result.ok, result.output, self.now_ms * MS)
            session.tick(self.now_ms * MS)
        self._notify()
        events = session.events[first:]
        said = [e for e in events if e.kind == "said"]
        latency = (said[0].at_ns // MS - start_ms) if said else None
        return Turn(caller, events, latency, settled)

    def _notify(self) -> None:
        if self.on_event is None:
            return
        while self.shown < len(self.session.events):
            self.on_event(self.session.events[self.shown])
            self.shown += 1


def demo_world(agent_dir: str) -> tuple[tuple[SimTurn, ...], tuple[Route, ...], str]:
    """The simulator's rules and the fake tool server of the agent's demo.toml (none without one)."""
    path = Path(agent_dir) / "demo.toml"
    if not path.is_file():
        return (), (), ""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    server = data.get("tool_server", {})
    return (tuple(SimTurn.from_dict(t) for t in data.get("sim", [])),
            tuple(Route.from_dict(r) for r in server.get("routes", [])), server.get("env", ""))


def vendor_target(config, agent) -> Endpoint | None:
    """Where the conversation goes: the configured vendor (or OPENAI_API_KEY's), None for the simulator."""
    key = config.realtime_api_key or os.environ.get("OPENAI_API_KEY", "")
    if not config.realtime_url and not key:
        return None
    url = config.realtime_url or "wss://api.openai.com/v1/realtime"
    provider = config.realtime_provider if config.realtime_provider != "auto" else detect_provider(url)
    return endpoint(url, agent.model or config.model, key, provider, config.realtime_deployment, os.environ,
                    naming=config.realtime_naming)


def conversation_for(agent, config, rules, **kwargs) -> Conversation:
    target = vendor_target(config, agent)
    return Conversation(agent, rules, config=config, naming=config.realtime_naming,
                        vendor=VendorModel(target) if target is not None else None, **kwargs)


