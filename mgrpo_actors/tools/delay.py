"""`delay`: an I/O-bound tool that waits a configured latency and echoes its text.

It stands in for a remote API (a real web search answers in tens to hundreds of milliseconds while
the caller's CPU idles), so tool throughput can be measured without a network: `mgrpo bench tools`
serves it from 1, 2, 4, 8 tool processes. The wait is `time.sleep`, which releases the GIL, as a
socket read would. Nothing in the project serves it by default; a config names it under
`tools.extra`:

    tools:
      serve: [delay]
      extra: [{name: delay, factory: "mgrpo_actors.tools.delay:DelayTool", args: {latency_s: 0.05}}]
"""

from __future__ import annotations

import math
import time
from typing import Any

from mgrpo_actors.tools.base import SchemaTool, ToolOutput

__all__ = ["DelayTool"]


class DelayTool(SchemaTool):
    """Waits `latency_s`, then returns its `text` argument unchanged."""

    name = "delay"
    description = "Wait a fixed latency, then return `text` unchanged (a stand-in for a slow remote API)."
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "returned as it is"}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def __init__(self, latency_s: float = 0.05) -> None:
        """latency_s: seconds every call waits (>= 0; 0 makes it a plain echo)."""
        super().__init__()
        if isinstance(latency_s, bool) or not isinstance(latency_s, (int, float)):
            raise ValueError(f"latency_s must be a number of seconds, got {type(latency_s).__name__} {latency_s!r}")
        if not math.isfinite(latency_s) or latency_s < 0:
            raise ValueError(f"latency_s must be a finite number of seconds >= 0, got {latency_s!r}")
        self.latency_s = float(latency_s)

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        time.sleep(self.latency_s)  # releases the GIL: other threads of the process run meanwhile
        return ToolOutput.success(arguments["text"])
