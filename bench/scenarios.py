"""The bench's call scenarios: what the model simulator says and what each simulated caller does.

Owns, per scenario, the model simulator's SimConfig and a CallScript generator for a call of any
length (calls of one run have different lengths: they start at different times during the ramp and all
end together). A scenario may also name VOICECORE_* settings the stack needs (``stack_env``:
the hallucination scenario turns the validation gate on and points it at bench/kb/). Must not know: processes, sockets, how figures are computed (voicecore.callreport).

Timeline facts the scripts rely on (measured on the demo, see voicecore/demo.py): the greeting's first
frame reaches the carrier about 250 ms after the stream's first media frame; after a caller utterance
ends, the model worker's server VAD waits 500 ms of silence, the simulator answers 200 ms later, so the
next answer is audible about 800 ms after the caller stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from voicecore.agent.load import load_agent
from voicecore.agent.scenario import Scenario as AgentScenario
from voicecore.agent.scenario import load_scenario
from voicecore.sim.audio_clips import default_library
from voicecore.sim.carrier import CallScript
from voicecore.sim.model import SimConfig

AGENT_PREFIX = "agent:"  # --scenario agent:DIR: an agent directory's demo.toml (voicecore/agent/scenario.py)
SCENARIOS = ("steady", "bargein-storm", "model-stall", "silence", "hallucination", "overlap", "chaos", "turn-taking")
# Run by `--scenario hallucination` after the gated run, never named on the command line: the same calls
# with the validation gate off, for the ungated time to first audio (bench/run.py).
HALLUCINATION_UNGATED = "hallucination-ungated"

GREETING_START_MS = 250  # first media frame -> greeting audible
ANSWER_GAP_MS = 800  # end of a caller utterance -> the answer is audible
QUESTION_MARGIN_MS = 400  # after the agent's answer ends, before the caller asks (no accidental barge-in)
STALL_AFTER_MS = 300  # model-stall: output pauses after 300 ms of generation (1.2 s of audio at 4x) ...
STALL_MS = 2500  # ... for 2.5 s: about 1.6 s of each answer the model has not produced yet
STORM_PERIOD_MS = 3000  # bargein-storm: a barge-in about every 3 s (spread by call index)
# overlap: the model starts a second response while this share of its responses still stream (a real
# server does: server VAD racing a client response.create, a function-call follow-up; the caller must still
# hear one voice: docs/explanation/invariants.md#inv-one-voice)
OVERLAP_PROBABILITY = 0.25

# Long answers so the agent talks most of the time; short caller questions.
LONG_ANSWERS = ("agent_greeting", "agent_basic_price", "agent_premium_price", "agent_hours", "agent_sim_card")
SHORT_QUESTIONS = ("caller_interrupt", "caller_premium")

# hallucination: the knowledge base that grounds every number the simulator's honest agent clips say.
KNOWLEDGE_DIR = Path(__file__).resolve().parent / "kb"
HALLUCINATION_QUESTIONS = ("caller_basic_price", "caller_premium")
# turn-taking: over each long answer the caller says a backchannel, then a cough or a short real turn that
# cuts the answer off (the turn figures, voicecore/callturns.py, judge how the runtime took each)
BACKCHANNEL_AFTER_MS = 1000  # answer audible -> the caller's backchannel
SECOND_SOUND_AFTER_MS = 2400  # answer audible -> the cough, or the short real turn
SHORT_TURNS = ("caller_short_no", "caller_short_stop", "caller_short_wait", "caller_hold_on", "caller_yeah_but",
               "caller_who_is_this")  # the simulator answers any question
GATE_SLACK_MS = 500  # gated audio waits for its transcript's approval: the answer may end this much later
MAX_RESPONSES = 400  # hallucination indices are listed up to here (far beyond any bench call)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    sim_config: SimConfig
    expect_bargeins: bool  # whether every call should see at least one clear
    description: str
    # One period of the scenario's conversation: the default ramp spreads call starts over at least
    # this long, so in the measured window the calls are at every phase of it, not in lockstep.
    cycle_ms: int
    # VOICECORE_* settings this scenario needs in the stack's environment (over the caller's own).
    stack_env: tuple[tuple[str, str], ...] = ()
    agent: AgentScenario | None = None  # an agent's demo scenario (agent:DIR): its callers, model rules, tool API

    def script(self, duration_ms: int, call_index: int) -> CallScript:
        if self.agent is not None:
            return self.agent.call_script(call_index, duration_ms)
        return _SCRIPTS[self.name](self, duration_ms, call_index)


def get_scenario(name: str) -> Scenario:
    if name.startswith(AGENT_PREFIX):
        return _agent(name)
    if name == "steady":
        return Scenario(name, SimConfig(clip_sequence=LONG_ANSWERS), False,
                        "agent talks most of the time (long answers), caller asks short questions between them", 7500)
    if name == "bargein-storm":
        return Scenario(name, SimConfig(clip_sequence=LONG_ANSWERS, late_deltas_after_cancel=2), True,
                        f"each caller barges in about every {STORM_PERIOD_MS / 1000:.0f} s", STORM_PERIOD_MS + 1000)
    if name == "model-stall":
        return Scenario(name, SimConfig(clip_sequence=LONG_ANSWERS, stall_after_ms=STALL_AFTER_MS, stall_ms=STALL_MS),
                        False, f"the model stops for {STALL_MS} ms after {STALL_AFTER_MS} ms of every response", 9000)
    if name == "overlap":
        steady = get_scenario("steady")
        sim = replace(steady.sim_config, overlap_probability=OVERLAP_PROBABILITY, late_deltas_after_cancel=2)
        return Scenario(name, sim, False,
                        f"steady's calls; the model starts a second response during {OVERLAP_PROBABILITY:.0%} of its "
                        "responses and sends late deltas after a cancel", steady.cycle_ms)
    if name == "silence":
        return Scenario(name, SimConfig(clip_sequence=("agent_greeting",)), False, "callers silent, agent greets only", 1000)
    if name == "chaos":
        steady = get_scenario("steady")  # steady's calls while bench/chaos.py injects its faults
        return replace(steady, name=name, description="steady's calls; workers killed and the model vendor "
                                                      "misbehaving one fault after another (bench/chaos.py)")
    if name in ("hallucination", HALLUCINATION_UNGATED):
        return _hallucination(name)
    if name == "turn-taking":
        return Scenario(name, SimConfig(clip_sequence=LONG_ANSWERS), False,
                        "over each long answer the caller says a backchannel, then coughs (and asks after the "
                        "answer) or cuts the answer off with a short real turn", 16000)
    raise ValueError(f"unknown scenario {name!r} (choose from {', '.join(SCENARIOS)})")


def _agent(name: str) -> Scenario:
    """An agent run under load: the agent's callers (script i % n), the model simulator following its rules
    (function calls included), the stack loading the agent (turn-taking controller); the bench starts the
    fake tool API (bench/run.py)."""
    directory = Path(name[len(AGENT_PREFIX):]).expanduser().resolve()
    load_agent(directory)  # every problem of its files, before anything starts
    scenario = load_scenario(directory)
    longest_ms = int(max(script.seconds for script in scenario.scripts) * 1000)
    return Scenario(name, SimConfig(turns=scenario.sim_turns), False,
                    f"the agent in {directory.name}: its demo.toml callers, model rules and tool API", longest_ms,
                    stack_env=(("VOICECORE_AGENT", str(directory)),), agent=scenario)


def _clip(name: str) -> bytes:
    return default_library().audio[name]


def _duration(name: str) -> int:
    return default_library().info(name).duration_ms


def _turns(answers: tuple[str, ...], questions: tuple[str, ...], duration_ms: int, call_index: int,
           extra_ms: int) -> CallScript:
    """Agent answer, a question after it ends (plus ``extra_ms``), the next answer, ...; no utterance
    overlaps the agent."""
    utterances = []
    agent_start = GREETING_START_MS
    k = 0
    while True:
        agent_end = agent_start + _duration(answers[k % len(answers)]) + extra_ms
        ask_at = agent_end + QUESTION_MARGIN_MS
        question = questions[(k + call_index) % len(questions)]
        if ask_at + _duration(question) >= duration_ms:
            break
        utterances.append((ask_at, _clip(question)))
        agent_start = ask_at + _duration(question) + ANSWER_GAP_MS
        k += 1
    return CallScript(duration_ms=duration_ms, utterances=tuple(utterances), bargein_at_ms=())


def _dialogue(scenario: Scenario, duration_ms: int, call_index: int, extra_ms: int) -> CallScript:
    return _turns(scenario.sim_config.clip_sequence, SHORT_QUESTIONS, duration_ms, call_index, extra_ms)


def _steady(scenario: Scenario, duration_ms: int, call_index: int) -> CallScript:
    return _dialogue(scenario, duration_ms, call_index, 0)


def _stall(scenario: Scenario, duration_ms: int, call_index: int) -> CallScript:
    # The stall stretches every answer by the time the model was silent.
    return _dialogue(scenario, duration_ms, call_index, STALL_MS - STALL_AFTER_MS * 3)


def _storm(scenario: Scenario, duration_ms: int, call_index: int) -> CallScript:
    interrupt = _clip("caller_interrupt")
    period = STORM_PERIOD_MS + (call_index * 137) % 1000  # callers do not barge in in lockstep (cycle_ms: the longest)
    at = GREETING_START_MS + 1500
    utterances = []
    while at + len(interrupt) // 8 < duration_ms:
        utterances.append((at, interrupt))
        at += period
    return CallScript(duration_ms=duration_ms, utterances=tuple(utterances))  # barge-in at each utterance


def _turn_taking(scenario: Scenario, duration_ms: int, call_index: int) -> CallScript:
    """Answer k audible: a backchannel BACKCHANNEL_AFTER_MS in; then, for even k, a noise and a question after
    the answer ends (the next answer follows it); for odd k, a short real turn that cuts the answer off (the
    next answer follows that turn). Only the real turns over the agent are barge-ins."""
    library = default_library()
    backchannels = tuple(c.name for c in library.infos if c.kind == "backchannel")
    noises = tuple(c.name for c in library.infos if c.kind == "noise")
    answers = scenario.sim_config.clip_sequence
    utterances: list[tuple[int, bytes]] = []
    bargeins: list[int] = []
    agent_start = GREETING_START_MS
    k = 0
    while True:
        spin = k + call_index
        sounds = [(agent_start + BACKCHANNEL_AFTER_MS, backchannels[spin % len(backchannels)])]
        if k % 2 == 0:
            sounds.append((agent_start + SECOND_SOUND_AFTER_MS, noises[spin % len(noises)]))
            ask_at = agent_start + _duration(answers[k % len(answers)]) + QUESTION_MARGIN_MS
            question = SHORT_QUESTIONS[spin % len(SHORT_QUESTIONS)]
        else:
            ask_at = agent_start + SECOND_SOUND_AFTER_MS
            question = SHORT_TURNS[(spin // 2) % len(SHORT_TURNS)]
        sounds.append((ask_at, question))
        if ask_at + _duration(question) >= duration_ms:
            break
        utterances += [(at, _clip(name)) for at, name in sounds]
        if k % 2:
            bargeins.append(ask_at)
        agent_start = ask_at + _duration(question) + ANSWER_GAP_MS
        k += 1
    return CallScript(duration_ms=duration_ms, utterances=tuple(utterances), bargein_at_ms=tuple(bargeins))


def _silence(scenario: Scenario, duration_ms: int, call_index: int) -> CallScript:
    return CallScript(duration_ms=duration_ms, utterances=(), bargein_at_ms=())


def _hallucination(name: str) -> Scenario:
    """Callers ask a question after every answer; the simulator hallucinates every other answer.

    The simulator counts responses per session (greeting 0, then answers) and hallucinates by index. In
    the gated run a rejected answer is followed by the safe line, which takes the next index: answer
    indices 1, 3 (safe line 2), 4, 6 (safe line 5), ... so indices 1, 4, 7, ... make every other answer
    a hallucination there. Without the gate there are no safe lines, so the odd indices do the same.
    No clip_sequence: the simulator must pick agent_safe_line for "Say exactly: <safe line>" (a pinned
    sequence would override the instructions); its automatic choice cycles the question and answer clips.
    """
    gated = name == "hallucination"
    step = 3 if gated else 2
    sim = SimConfig(hallucinate_responses=tuple(range(1, MAX_RESPONSES, step)))
    env = (("VOICECORE_GATE_POLICY", "numbers" if gated else "off"), ("VOICECORE_KNOWLEDGE_DIR", str(KNOWLEDGE_DIR)))
    text = sim.hallucinated_text
    description = (f"callers ask after every answer; every other answer's transcript says {text!r} (not in bench/kb), "
                   + ("validation gate on (policy numbers)" if gated else "validation gate off"))
    return Scenario(name, sim, False, description, 8000, stack_env=env)


def auto_agent_clips() -> tuple[str, ...]:
    """The agent clips the simulator picks, in order, when neither a clip_sequence nor instructions
    name one (voicecore/sim/model/session.py _choose_clip): the question and answer clips of the index."""
    library = default_library()
    return tuple(c.name for c in library.infos if c.role == "agent" and c.kind in ("question", "answer"))


def _ask_after_answers(scenario: Scenario, duration_ms: int, call_index: int) -> CallScript:
    """Greeting (the first automatic clip), a question after it ends, the next answer, ...

    Timed on the longest outcome of each turn: the honest answer's clip played in full behind the
    gate's wait (a rejected answer is replaced by the shorter safe line), so no question lands on
    agent speech and every cancel in the run is the gate's.
    """
    return _turns(auto_agent_clips(), HALLUCINATION_QUESTIONS, duration_ms, call_index, GATE_SLACK_MS)


_SCRIPTS = {"steady": _steady, "overlap": _steady, "chaos": _steady, "bargein-storm": _storm, "model-stall": _stall, "silence": _silence,
            "hallucination": _ask_after_answers, HALLUCINATION_UNGATED: _ask_after_answers,
            "turn-taking": _turn_taking}
