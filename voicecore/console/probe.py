"""The demo's look at the console: observers of a live call, and how fast the pages load.

Owns two client-side measurements against a running console (the demo's, with an API key it made):
- ``watch_first_call``: an every-call observer waits for the first call to start; then ``observers``
  observers of that call open at once (``since=0``), and a late joiner ``late_after_s`` later (``since=0``
  too: it replays from the store, then goes on live). Each collects until ``call.ended``. The figure: every
  observer got the same sequence, each ``seq`` once, rising by one from 1.
- ``page_loads``: a page load as a browser makes it, one request after another: the page, its static
  files, and the API requests its script makes on load (the calls list: ``/api/calls`` and ``/api/live``;
  a call's page: ``/api/calls/SID`` and its waveform, a replay of the call's record the first time).
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request
from typing import Any

import orjson
from websockets.asyncio.client import connect

from voicecore.stats import summary

STATIC_REF = re.compile(rb"""(?:src|href)=["'](/static/[^"'?#]+)["']""")


async def _observe(url: str, key: str, into: list[dict], timeout_s: float) -> str:
    """Collect events until call.ended; the close reason if the console closed the socket first."""
    try:
        async with connect(url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=10,
                           max_size=2**20) as ws:
            async with asyncio.timeout(timeout_s):
                async for message in ws:
                    event = orjson.loads(message)
                    into.append(event)
                    if event["type"] == "call.ended":
                        return ""
            return f"closed {ws.close_code} {ws.close_reason}"
    except TimeoutError:
        return "timed out before call.ended"
    except Exception as exc:  # noqa: BLE001 (a figure, not a crash: the report says what went wrong)
        return f"{type(exc).__name__}: {exc}"


def _sequence_ok(events: list[dict]) -> bool:
    return [e["seq"] for e in events] == list(range(1, len(events) + 1)) and bool(events) and events[-1]["type"] == "call.ended"


async def watch_first_call(console_listen: str, key: str, call_seconds: float, observers: int = 10,
                           late_after_s: float = 5.0) -> dict[str, Any]:
    base = f"ws://{console_listen}/observe"
    timeout_s = call_seconds + 60
    everything: list[dict] = []
    firehose = asyncio.create_task(_observe(base, key, everything, timeout_s))
    deadline = time.monotonic() + 30
    while not everything and time.monotonic() < deadline and not firehose.done():
        await asyncio.sleep(0.02)
    if not everything:
        firehose.cancel()
        return {"observers": observers, "problems": ["no call started within 30 s on the every-call observer"]}
    sid = everything[0]["call_sid"]
    collected: list[list[dict]] = [[] for _ in range(observers)]
    tasks = [asyncio.create_task(_observe(f"{base}?call={sid}&since=0", key, into, timeout_s)) for into in collected]
    await asyncio.sleep(late_after_s)
    late: list[dict] = []
    joined_at = time.time()
    late_task = asyncio.create_task(_observe(f"{base}?call={sid}&since=0", key, late, timeout_s))
    endings = await asyncio.gather(*tasks, late_task)
    firehose.cancel()
    reference = [(e["seq"], e["type"]) for e in late]
    problems = [f"observer {i + 1}: {ending}" for i, ending in enumerate(endings) if ending]
    same = [[(e["seq"], e["type"]) for e in events] == reference for events in collected]
    if not _sequence_ok(late):
        problems.append("the late joiner's events are not seq 1..N ending in call.ended")
    if not all(same):
        problems.append(f"{same.count(False)} of {observers} observers got a different sequence than the late joiner")
    return {"call_sid": sid, "observers": observers, "events": len(reference),
            "observers_identical": all(same) and _sequence_ok(late), "late_joiner_after_s": late_after_s,
            "late_joiner_identical": _sequence_ok(late) and all(same), "event_types": sorted({k for _, k in reference}),
            "problems": problems,
            "late_joiner_replayed": sum(1 for e in late if e["at"] < joined_at)}  # events it got from the store


def _get(url: str, key: str) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read()


def _load(base: str, key: str, page: str, api: list[str]) -> float:
    started = time.perf_counter()
    html = _get(base + page, key)
    for ref in dict.fromkeys(STATIC_REF.findall(html)):
        _get(base + ref.decode(), key)
    for path in api:
        _get(base + path, key)
    return (time.perf_counter() - started) * 1000


def page_loads(console_listen: str, key: str, call_sids: list[str], list_loads: int = 100) -> dict[str, Any]:
    """Blocking (a thread's job): the calls list ``list_loads`` times, then each call's page once."""
    base = f"http://{console_listen}"
    problems: list[str] = []
    list_ms: list[float] = []
    call_ms: list[float] = []
    try:
        for _ in range(list_loads):
            list_ms.append(_load(base, key, "/", ["/api/calls?limit=100", "/api/live"]))
        for sid in call_sids:
            call_ms.append(_load(base, key, f"/calls/{sid}", [f"/api/calls/{sid}", f"/api/calls/{sid}/waveform?points=800"]))
    except (OSError, urllib.error.URLError) as exc:
        problems.append(f"console page load failed: {exc}")
    return {"calls_list_ms": summary(list_ms, 2), "call_page_ms": summary(call_ms, 2), "problems": problems}
