"""A ToolExecutor (rollout/driver.py) that sends tool calls to `--role tool` actors over NATS.

All calls of one turn batch are in flight at once (one request each, spread over the tool's queue
group), with a bounded retry on another instance (calls.py); a tool nobody serves, a timeout after
the retries or a remote failure becomes an error result for the agent, never an exception that ends
the rollout (docs/architecture.md §Errors).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from mgrpo_actors.agents.episode import ToolCall
from mgrpo_actors.rollout.calls import CallOutcome, CallStats, request_all
from mgrpo_actors.rollout.driver import ToolExecutor
from mgrpo_actors.rollout.wire import tool_output_from_wire
from mgrpo_actors.runtime import Bus
from mgrpo_actors.tools.base import ToolOutput
from protocols import ToolRequest, ToolResult

__all__ = ["bus_tool_executor"]


def bus_tool_executor(
    bus: Bus,
    remote: Collection[str],
    local: ToolExecutor | None = None,
    timeout_s: float = 30.0,
    caller: str = "",
    retries: int = 0,
    stats: CallStats | None = None,
) -> ToolExecutor:
    """Calls of tools in `remote` go over NATS; the rest to `local` (e.g. `reason` on the agent's own model)."""

    def execute(calls: Sequence[ToolCall]) -> list[ToolOutput]:
        results: list[ToolOutput | None] = [None] * len(calls)
        remote_calls = [(i, call) for i, call in enumerate(calls) if call.name in remote]
        local_calls = [(i, call) for i, call in enumerate(calls) if call.name not in remote]
        if local_calls:
            if local is None:
                for i, call in local_calls:
                    results[i] = ToolOutput.failure(f"tool {call.name!r} is not served here")
            else:
                for (i, _), result in zip(local_calls, local([call for _, call in local_calls]), strict=True):
                    results[i] = result
        if remote_calls:
            subjects = [bus.subjects.tool(call.name) for _, call in remote_calls]

            def request(index: int, attempt: int) -> ToolRequest:
                call = remote_calls[index][1]
                return ToolRequest(call_id=call.call_id, tool=call.name, arguments=call.arguments, caller=caller)

            for (i, call), outcome in zip(
                remote_calls, request_all(bus, subjects, request, timeout_s, retries), strict=True
            ):
                if stats is not None:
                    stats.record(call.name, outcome)
                results[i] = _tool_output(call, outcome)
        return [r for r in results if r is not None]

    return execute


def _tool_output(call: ToolCall, outcome: CallOutcome) -> ToolOutput:
    if outcome.reply is None:
        tries = f" after {outcome.attempts} attempts" if outcome.attempts > 1 else ""
        return ToolOutput.failure(f"tool {call.name!r} unavailable{tries}: {outcome.error}")
    if not isinstance(outcome.reply, ToolResult):
        return ToolOutput.failure(f"tool {call.name!r} answered with a {type(outcome.reply).__name__}")
    return tool_output_from_wire(outcome.reply)
