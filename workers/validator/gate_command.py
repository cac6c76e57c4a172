"""`voicecore gate DIR "a sentence"`: the verdict an agent's validation gate gives one sentence, and why.

The tool a builder uses to see why an answer was refused. It reads the agent directory as `voicecore up`
does (its knowledge folder, its languages, the gate policy of its answers: the initial node's
``gate_policy``, else ``[gate] answers``; ``--policy`` and ``--node`` choose another), streams the sentence
word by word through the validator's own core (workers/validator/core.py, as a realtime model's transcript
deltas reach it) and reports its verdict, with every claim the sentence makes: the number, what the
sentence says it is of, and the passage that supports it or the nearest passage and why it does not.
Exit status: 0 approved, 1 rejected, 2 usage error (no such agent, an agent with problems, a scripted
policy without ``--script``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from voicecore.bus import messages
from voicecore.validate.knowledge import ClaimVerdict, KnowledgeBase, days_phrase, load_knowledge_dir
from workers.validator.core import APPROVE_ALL_FRAMES, POLICIES, ValidatorCore, reason_category

FRAMES_PER_CHAR = 3  # audio frames per transcript char: about 17 chars/s, a phone voice's pace
_KEY = (0, 0, 1)


def stream_verdict(core: ValidatorCore, text: str, policy: str, language: str, script: str = "",
                   forbidden: tuple[str, ...] = (), facts: str = "") -> messages.Verdict:
    """The last verdict of ``text`` sent to ``core`` as a realtime model's transcript: one word per delta
    (each with its leading space), then done. Approved: APPROVE_ALL frames; else rejected with a reason."""
    last: messages.Verdict | None = None
    for verdict in core.handle(messages.GateOpen(*_KEY, policy, script, language, "\n".join(forbidden), facts)):
        last = verdict  # policy "off" approves everything at once
        if verdict.rejected or verdict.approved_frames >= APPROVE_ALL_FRAMES:
            return verdict
    parts = text.split(" ")
    so_far = ""
    for delta in [parts[0]] + [" " + p for p in parts[1:]]:
        so_far += delta
        for verdict in core.handle(messages.TranscriptDelta(*_KEY, delta, FRAMES_PER_CHAR * len(so_far))):
            last = verdict
            if verdict.rejected:
                return verdict
    for verdict in core.handle(messages.TranscriptDone(*_KEY, "", FRAMES_PER_CHAR * len(so_far))):
        last = verdict
    assert last is not None  # a done always answers: approved in full or rejected
    return last


def judge_sentence(text: str, knowledge: KnowledgeBase | None, policy: str, language: str, script: str = "",
                   forbidden: tuple[str, ...] = (), facts: str = "") -> dict[str, Any]:
    """The gate's verdict on one sentence and its claims, as JSON-able data (``voicecore gate --json``)."""
    verdict = stream_verdict(ValidatorCore(knowledge), text, policy, language, script, forbidden, facts)
    claims: list[ClaimVerdict] = []
    if policy in ("numbers", "strict"):
        claims = ValidatorCore(knowledge).explain(text, language, facts)
    return {
        "approved": not verdict.rejected,
        "policy": policy,
        "language": language,
        "sentence": text,
        "reason": verdict.reason,
        "category": reason_category(verdict.reason) if verdict.rejected else "",
        "claims": [_claim_data(c) for c in claims],
        "citations": json.loads(verdict.citations or "[]"),
    }


def _claim_data(verdict: ClaimVerdict) -> dict[str, Any]:
    claim = verdict.claim
    mention = claim.mention

    def passage(citation) -> dict[str, Any] | None:
        if citation is None:
            return None
        return {"file": citation.file, "line": citation.line, "snippet": citation.snippet}

    return {
        "number": mention.raw, "kind": mention.kind, "value": mention.value, "readings": list(mention.readings),
        "unit": mention.unit, "subject": list(claim.subject),
        "days": sorted(claim.days) if claim.days is not None else None,
        "role": claim.role or None, "period": claim.period, "counts": claim.noun,
        "supported": verdict.ok, "citation": passage(verdict.citation), "near_miss": passage(verdict.near_miss),
        "why": verdict.why or None,
    }


def _describe(report: dict[str, Any], out) -> None:
    verdict = "approved" if report["approved"] else "rejected"
    print(f"{verdict} (policy {report['policy']}, language {report['language']})", file=out)
    if not report["approved"]:
        print(f"  reason: {report['reason']}", file=out)
    for claim in report["claims"]:
        about = []
        if claim["subject"]:
            about.append("of " + ", ".join(claim["subject"]))
        if claim["role"]:
            about.append({"start": "opening", "end": "closing"}[claim["role"]])
        if claim["days"] is not None:
            about.append(days_phrase(frozenset(claim["days"])))
        if claim["period"]:
            about.append("per " + claim["period"])
        if claim["counts"]:
            about.append("counts " + claim["counts"])
        readings = " or ".join(claim["readings"]) + (f" {claim['unit']}" if claim["unit"] else "")
        head = f"  {'ok ' if claim['supported'] else 'NO '} {claim['number']!r} = {readings}"
        print(head + (f" ({'; '.join(about)})" if about else ""), file=out)
        if claim["citation"]:
            c = claim["citation"]
            print(f"       cites {c['file']}:{c['line']} \"{c['snippet']}\"", file=out)
        elif claim["near_miss"]:
            c = claim["near_miss"]
            print(f"       nearest {c['file']}:{c['line']} \"{c['snippet']}\" ({claim['why']})", file=out)
        else:
            print("       no passage comes near it", file=out)
    if report["policy"] in ("numbers", "strict") and not report["claims"]:
        print("  no numbers: nothing to ground", file=out)


def run_gate(directory: str, sentence: str, policy: str | None = None, node: str | None = None,
             script: str | None = None, facts: str | None = None, as_json: bool = False, out: Any = None,
             err: Any = None) -> int:
    """`voicecore gate`: 0 approved, 1 rejected, 2 usage error (module docstring)."""
    from voicecore.agent.load import AgentError, load_agent

    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    try:
        spec = load_agent(directory)
    except AgentError as exc:
        for problem in exc.problems:
            print(problem, file=err)
        print(f"voicecore gate: the agent has {len(exc.problems)} problem(s)", file=err)
        return 2
    chosen = spec.flow.nodes.get(node or spec.flow.initial_node)
    if chosen is None:
        print(f"voicecore gate: no node {node!r} (nodes: {', '.join(spec.flow.nodes)})", file=err)
        return 2
    policy = policy or chosen.gate_policy or spec.gate_answers
    if policy not in POLICIES:
        print(f"voicecore gate: --policy: expected one of {', '.join(POLICIES)}", file=err)
        return 2
    if policy in ("scripted", "strict") and not (script or "").strip():
        print(f"voicecore gate: policy {policy} checks a sentence against a script: give it with --script", file=err)
        return 2
    fact_text = ""
    if facts:
        try:
            fact_text = Path(facts[1:]).read_text(encoding="utf-8") if facts.startswith("@") else facts
        except OSError as exc:
            print(f"voicecore gate: --facts: cannot read {facts[1:]!r}: {exc}", file=err)
            return 2
    knowledge = None
    if spec.knowledge_dir:
        knowledge = KnowledgeBase.from_documents(load_knowledge_dir(spec.knowledge_dir))
    forbidden = tuple(spec.forbidden) + tuple(chosen.forbidden)
    report = judge_sentence(sentence, knowledge, policy, spec.gate_language, script or "", forbidden, fact_text)
    report["agent"] = spec.name
    report["node"] = chosen.name
    report["knowledge"] = spec.knowledge_dir or None
    if as_json:
        print(json.dumps(report, ensure_ascii=False), file=out)
    else:
        _describe(report, out)
    return 0 if report["approved"] else 1


def register(subparsers: Any) -> None:
    """Add `voicecore gate` to the `voicecore` parser (entry point ``voicecore.commands``: gate): it runs the
    validator's own core, which the library does not import."""
    gate = subparsers.add_parser("gate", help="the verdict an agent's validation gate gives a sentence: its claims, citations "
                                       "or why it is rejected (exit 0 approved, 1 rejected, 2 usage error)")
    gate.add_argument("path", metavar="DIR", help="the agent directory (its knowledge, languages and gate policy)")
    gate.add_argument("sentence", help="the sentence an answer says")
    gate.add_argument("--policy", choices=("off", "numbers", "scripted", "strict"),
                      help="judge under this policy (default: the node's gate_policy, else [gate] answers)")
    gate.add_argument("--node", metavar="NAME", help="the flow node the answer is said in (default: the initial node)")
    gate.add_argument("--script", metavar="TEXT", help="scripted and strict: the text the sentence must follow")
    gate.add_argument("--facts", metavar="TEXT|@FILE", help="a tool result the answer may cite numbers from")
    gate.add_argument("--json", action="store_true", help="print one JSON object")
    gate.set_defaults(func=_run)


def _run(args: Any) -> int:
    return run_gate(args.path, args.sentence, policy=args.policy, node=args.node, script=args.script, facts=args.facts,
                    as_json=args.json)
