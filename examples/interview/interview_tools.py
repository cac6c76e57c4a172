"""Python tools of the interview example agent (flow.json names them as "interview_tools:<function>").

A stand-in: ``record_answer`` keeps nothing. Replace its body with a write to your applicant-tracking
system; the runtime already de-duplicates it ("writes": true), so the same answer recorded twice within
the agent's dedupe window reaches your system once.
"""

from __future__ import annotations

from typing import Any


async def record_answer(arguments: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """Accept ``arguments["answer"]`` to ``arguments["question"]``; stores nothing (a stand-in)."""
    return {"saved": True}
