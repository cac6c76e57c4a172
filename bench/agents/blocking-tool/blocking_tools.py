"""The tool of the tool-isolation measurement: a synchronous client that takes 5 s to answer.

It blocks whatever event loop runs it for those 5 s. In the model worker's tool pool that is its own
process's loop; run on the model worker's loop, as tools once were, it held up every call on the node."""

from __future__ import annotations

import os
import time
from typing import Any

# BLOCKING_TOOL_S=0 in the bench's environment: the same calls with a tool that answers at once (the control run)
BLOCK_S = float(os.environ.get("BLOCKING_TOOL_S", "5"))


async def slow_lookup(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    time.sleep(BLOCK_S)  # deliberately not asyncio.sleep: the blocking call under measurement
    return {"found": True, "waited_s": BLOCK_S}
