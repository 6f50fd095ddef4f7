"""The one place in-process types become wire messages and back (protocols/messages.py).

Twins have distinct names: a tool's `ToolOutput` travels as a `ToolResult`; an agent's
`TokenTrajectory` travels as a `Trajectory`; an `AlignmentPlan` of the math becomes the rows of an
`AlignedBatch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mgrpo_actors.tools.base import ToolOutput
from protocols import ToolResult, Trajectory

if TYPE_CHECKING:  # the tool role converts ToolOutputs without importing transformers
    from mgrpo_actors.agents.trajectory import TokenTrajectory
    from mgrpo_actors.config.agents import AgentConfig

__all__ = ["failed_trajectory", "tool_output_from_wire", "tool_output_to_wire", "trajectory_to_wire"]


def tool_output_to_wire(call_id: str, output: ToolOutput) -> ToolResult:
    """A tool actor's answer to the call `call_id`."""
    return ToolResult(call_id=call_id, ok=output.ok, content=output.content, error=output.error)


def tool_output_from_wire(result: ToolResult) -> ToolOutput:
    """What the agent's episode reads of a tool actor's answer."""
    return ToolOutput(ok=result.ok, content=result.content, error=result.error)


def trajectory_to_wire(trajectory: TokenTrajectory, agent: AgentConfig, **fields: Any) -> Trajectory:
    """An agent's token trajectory as the wire message of its side, with the sampling that produced it.

    `fields` are the message's ids and scores (run_id, side, step, query_id, rollout_index, call_id,
    attempt, format_ok, …).
    """
    return Trajectory(
        token_ids=trajectory.token_ids,
        loss_mask=trajectory.loss_mask,
        logprobs=trajectory.behaviour_logprobs,
        prompt_len=trajectory.prompt_len,
        policy_version=trajectory.policy_version,
        num_turns=len(trajectory.turn_spans),
        finish_reason=trajectory.finish_reasons[-1] if trajectory.finish_reasons else "",
        temperature=agent.temperature,
        top_p=agent.top_p,
        top_k=agent.top_k,
        **fields,
    )


def failed_trajectory(error: str, **fields: Any) -> Trajectory:
    """The wire record of a rollout that failed: no tokens, so it can only ever carry weight 0."""
    empty = {
        "token_ids": np.zeros(0, np.int32),
        "loss_mask": np.zeros(0, np.uint8),
        "logprobs": np.zeros(0, np.float32),
    }
    return Trajectory(**empty, policy_version=-1, failed=True, error=error, format_ok=False, **fields)
