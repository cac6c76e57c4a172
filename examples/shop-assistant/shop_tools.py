"""Python tools of the shop-assistant example agent (flow.json names them as "shop_tools:<function>").

A stand-in: ``send_sms`` sends nothing. It answers what a real SMS gateway's client would, so the demo and
the tests run on a machine without an SMS account. To send for real, replace its body with a call to your
provider's API (read its key from the environment, never from the agent's files: they go into call
records).
"""

from __future__ import annotations

from typing import Any


async def send_sms(arguments: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """Pretend to send ``arguments["text"]`` to ``arguments["phone"]``; nothing leaves the machine.

    Runs only after the caller confirmed (flow.json: "confirm": true), at most once per 30 s for the same
    arguments (the runtime's de-duplication), so a real implementation needs no guard of its own for a
    model that calls twice."""
    return {"sent": True, "to": arguments["phone"]}
