"""Judging rubric expectations (voicecore/chat/rubric.py) with the configured model: one Realtime session per
rubric, over the same client the text channel uses (workers/chat/runner.py ``VendorModel``), text out."""

from __future__ import annotations

import asyncio
import time

from picows import WSError

from voicecore.chat.rubric import Reading, RubricVerdict, judge_events
from voicecore.realtime.transport import Endpoint
from workers.chat.runner import VendorModel

JUDGE_TIMEOUT_S = 60.0


async def judge_rubric(target: Endpoint, naming: str, rubric: str, transcript: list[tuple[str, str]],
                       timeout_s: float = JUDGE_TIMEOUT_S) -> RubricVerdict:
    model = VendorModel(target)
    reading = Reading()
    try:
        try:
            await model.open()
        except (OSError, WSError, TimeoutError) as exc:
            reading.lost(f"cannot open the judge's model session: {type(exc).__name__}: {exc}")
            return reading.verdict  # type: ignore[return-value]
        for event in judge_events(naming, rubric, transcript):
            model.send(event)
        deadline = time.monotonic() + timeout_s
        while not reading.done:
            left = deadline - time.monotonic()
            if left <= 0:
                reading.lost(f"the judge did not answer within {timeout_s:g} s")
                break
            try:
                raw = await asyncio.wait_for(model.inbox.get(), left)
            except TimeoutError:
                continue
            if raw is None:
                reading.lost("the judge's model closed the session")
                break
            reading.feed(raw)
    finally:
        await model.close()
    return reading.verdict  # type: ignore[return-value]
