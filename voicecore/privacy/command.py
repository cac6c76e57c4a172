"""`voicecore redact [--language L] [--agent DIR] TEXT`: TEXT as it would be stored (exit 0; 1 when the agent
has problems)."""

from __future__ import annotations

import sys

from voicecore.privacy.redact import Redactor


def run_redact(text: str, language: str | None = None, agent_dir: str | None = None) -> int:
    languages: tuple[str, ...] = (language,) if language else ("en",)
    patterns: tuple[str, ...] = ()
    if agent_dir is not None:
        from voicecore.agent.load import AgentError, load_agent

        try:
            agent = load_agent(agent_dir)
        except AgentError as exc:
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            print(f"voicecore redact: the agent has {len(exc.problems)} problem(s)", file=sys.stderr)
            return 1
        patterns = agent.privacy_patterns
        if not language:
            languages = agent.languages
    print(Redactor(languages, patterns).redact(text))
    return 0
