"""A call's driver as the configuration and the agent make it: the spine's or the turn-taking controller's,
with the agent's instructions, voice, timings and failure policy.

Owns the one place both the model worker (every call) and `voicecore up`'s preflight (the session.update a
call would send, tried against the vendor before anything starts) build a driver from, so the two cannot
disagree about the session the vendor is asked for.
"""

from __future__ import annotations

import dataclasses

from voicecore.agent import settings as agent_settings
from voicecore.agent.flow import AgentFlow
from voicecore.agent.spec import AgentSpec
from voicecore.call import controller as controller_mod
from voicecore.call import core
from voicecore.call.driver import Driver
from voicecore.call.spine import SpineDriver
from voicecore.config import Config


def controller_config(config: Config, agent: AgentSpec) -> controller_mod.ControllerConfig:
    """The turn-taking controller's settings: the agent's timings and lines, the configuration's gate."""
    retrieve = config.retrieve_first == "on" or (config.retrieve_first == "auto" and bool(config.knowledge_dir))
    checkins = tuple(int(s * 1000) for s in agent.checkin_s)
    return controller_mod.ControllerConfig(
        gate_policy=config.gate_policy, gate_language=config.gate_language, safe_line=agent.safe_line,
        retrieve_first=retrieve, voice=agent.voice, silence_checkins_ms=checkins,
        silence_goodbye_ms=int(agent.goodbye_after_s * 1000), debounce_quiet_ms=agent.debounce_quiet_ms,
        debounce_cap_ms=agent.debounce_cap_ms, filler_after_ms=agent.filler_after_ms,
        confirm_timeout_ms=int(agent.confirm_timeout_s * 1000), confirm_languages=tuple(agent.languages),
        dedupe_ms=int(agent.dedupe_s * 1000), failure_after_failures=agent.failure_after_failures,
        failure_after_ms=int(agent.failure_after_s * 1000), failure_transfer=agent.failure_action == "transfer",
        hold_every_ms=int(agent.failure_hold_every_s * 1000), languages=tuple(agent.languages),
        backchannels=tuple(agent.backchannels), turn_detection=agent.turn_detection, vad_eagerness=agent.vad_eagerness,
        transcription_model=config.transcription_model or agent.transcription_model,
        transcript_wait_ms=agent.transcript_wait_ms)


def driver_for_config(config: Config, agent: AgentSpec, call_sid: str, *, first_tag: int = 1, greet: bool = True,
                      audio_format: str = "pcmu", placed: bool = False) -> Driver:
    """A new call's driver. call_control "spine": the mechanism core alone (barge-in on the model's
    speech_started), behind SpineDriver; "turns": the turn-taking controller around it. ``audio_format``:
    the law of the call's frames ("pcma" for an A-law stream passed through). ``placed``: the node placed the
    call (outbound): a callee asking not to be called again is heard (the controller's opt_out)."""
    format_args = {"audio_format": audio_format} if audio_format != "pcmu" else {}
    if agent_settings.call_control(config) == "turns":
        flow = AgentFlow(agent, **agent_settings.flow_overrides(config))
        policy = dataclasses.replace(controller_config(config, agent), opt_out=placed)
        return controller_mod.CallController(call_sid, flow=flow, config=policy,
                                             naming=config.realtime_naming, first_tag=first_tag, **format_args)
    # The spine takes no turns and runs no tools: the agent's instructions, voice and greeting only.
    return SpineDriver(call_sid, naming=config.realtime_naming, first_tag=first_tag, greet=greet,
                       gate_policy=config.gate_policy, safe_line=agent.safe_line,
                       instructions=AgentFlow(agent).session().instructions, voice=agent.voice,
                       greeting=agent.greeting, failure=controller_config(config, agent).failure_policy().to_dict(),
                       **format_args)


def first_session_update(config: Config, agent: AgentSpec, now_ns: int = 0) -> str:
    """The session.update a new call sends first: what the vendor must accept for any call to be served."""
    for action in driver_for_config(config, agent, "CApreflight").start(now_ns):
        if isinstance(action, core.SendToModel) and '"session.update"' in action.text:
            return action.text
    raise RuntimeError("the call's driver sent no session.update when it started")
