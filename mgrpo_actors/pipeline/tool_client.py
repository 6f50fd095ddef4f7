"""A ToolExecutor (agents/driver.py) that sends tool calls to `--role tool` actors over NATS.

All calls of one turn batch are in flight at once (one request each, spread over the tool's queue
group); a tool nobody serves, a timeout or a remote failure becomes an error result for the agent,
never an exception that ends the rollout (design.md §Errors).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from mgrpo_actors.agents.driver import ToolExecutor
from mgrpo_actors.agents.episode import ToolCall
from mgrpo_actors.pipeline.wire import tool_output_from_wire
from mgrpo_actors.runtime import Bus, BusError
from mgrpo_actors.tools.base import ToolOutput
from protocols import ProtocolError, ToolRequest
from protocols import ToolResult

__all__ = ["bus_tool_executor"]


def bus_tool_executor(bus: Bus, remote: Collection[str], local: ToolExecutor | None = None, timeout_s: float = 30.0, caller: str = "") -> ToolExecutor:
    """Calls of tools in `remote` go over NATS; the rest to `local` (e.g. `reason` on the agent's own model)."""

    def execute(calls: Sequence[ToolCall]) -> list[ToolOutput]:
        results: list[ToolOutput | None] = [None] * len(calls)
        pending = []
        for i, call in enumerate(calls):
            if call.name in remote:
                request = ToolRequest(call_id=call.call_id, tool=call.name, arguments=call.arguments, caller=caller)
                pending.append((i, call, bus.request_future(bus.subjects.tool(call.name), request, timeout_s)))
        local_calls = [(i, call) for i, call in enumerate(calls) if call.name not in remote]
        if local_calls:
            if local is None:
                for i, call in local_calls:
                    results[i] = ToolOutput.failure(f"tool {call.name!r} is not served here")
            else:
                for (i, _), result in zip(local_calls, local([call for _, call in local_calls]), strict=True):
                    results[i] = result
        for i, call, future in pending:
            results[i] = _wait(call, future)
        return [r for r in results if r is not None]

    return execute


def _wait(call: ToolCall, future) -> ToolOutput:  # type: ignore[no-untyped-def]
    try:
        reply = future.result()
    except (BusError, ProtocolError) as exc:
        return ToolOutput.failure(f"tool {call.name!r} unavailable: {exc}")
    if not isinstance(reply, ToolResult):
        return ToolOutput.failure(f"tool {call.name!r} answered with a {type(reply).__name__}")
    return tool_output_from_wire(reply)
