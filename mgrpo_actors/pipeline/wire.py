"""The one place in-process types become wire messages and back (protocols/messages.py).

Twins have distinct names: a tool's `ToolOutput` travels as a `ToolResult`; an agent's
`TokenTrajectory` travels as a `Trajectory`; an `AlignmentPlan` of the math becomes the rows of an
`AlignedBatch`.
"""

from __future__ import annotations

from mgrpo_actors.tools.base import ToolOutput
from protocols import ToolResult

__all__ = ["tool_output_from_wire", "tool_output_to_wire"]


def tool_output_to_wire(call_id: str, output: ToolOutput) -> ToolResult:
    """A tool actor's answer to the call `call_id`."""
    return ToolResult(call_id=call_id, ok=output.ok, content=output.content, error=output.error)


def tool_output_from_wire(result: ToolResult) -> ToolOutput:
    """What the agent's episode reads of a tool actor's answer."""
    return ToolOutput(ok=result.ok, content=result.content, error=result.error)
