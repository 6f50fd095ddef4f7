"""Delegation, M's call-return protocol with S (docs/method.md §The system being trained): M calls the `delegate`
tool with `{task, context}`, a sub-agent works on it, and M reads back only S's structured result.

A delegation is an explicit callback, `Delegate(requests) -> results`, taking a batch of requests: the
local implementation (rollout/local_subagents.py) runs the sub-agent episodes batched on the sub engine, and the
pipeline routes the same requests over NATS. Results are `protocols.SubtaskResult`, the wire type M's
side receives either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mgrpo_actors.tools.base import SchemaTool, ToolOutput
from mgrpo_actors.tools.schema import validate
from protocols.messages import SubtaskResult

__all__ = [
    "DELEGATE_TOOL_NAME",
    "Delegate",
    "DelegateTool",
    "DelegationRequest",
    "delegation_request",
    "format_subtask_result",
]

DELEGATE_TOOL_NAME = "delegate"
MAX_TASK_CHARS = 1000
MAX_CONTEXT_CHARS = 3000


@dataclass(frozen=True)
class DelegationRequest:
    """One `delegate` call of M, addressed so the result finds its way back."""

    task: str  # what S should find out, self-contained
    context: str  # what M already knows that S may need ("" if nothing)
    rollout_index: int  # which of the K rollouts of the query made the call
    call_id: str  # unique within the query; names S's trajectory for alignment


Delegate = Callable[[Sequence[DelegationRequest]], list[SubtaskResult]]


class DelegateTool(SchemaTool):
    """M's `delegate` tool as the prompt lists it and as its arguments are validated.

    A rollout never calls it: the driver sends delegations to the `Delegate` callback in batches, which
    is what lets the pipeline route them over NATS. Called directly, it answers with that explanation.
    """

    name = DELEGATE_TOOL_NAME
    description = (
        "Give a research subtask to a sub-agent that can search and read web pages. It returns a JSON object "
        "with its findings and the urls of its evidence. It sees nothing but the task and the context you give."
    )
    parameters = {
        "type": "object",
        "properties": {
            "task": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_TASK_CHARS,
                "description": "what to find out, as one self-contained request",
            },
            "context": {
                "type": "string",
                "maxLength": MAX_CONTEXT_CHARS,
                "description": "facts you already know that the sub-agent may need",
            },
        },
        "required": ["task"],
        "additionalProperties": False,
    }

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        return ToolOutput.failure("delegate is answered by a sub-agent through the rollout driver, not called directly")


def delegation_request(arguments: dict[str, Any], rollout_index: int, call_id: str) -> DelegationRequest | str:
    """The request M's `delegate` arguments make, or the error M should read instead."""
    errors = validate(arguments, DelegateTool.parameters)
    if errors:
        return f"invalid arguments for {DELEGATE_TOOL_NAME}: " + "; ".join(errors)
    task, context = arguments["task"].strip(), arguments.get("context", "").strip()
    if not task:
        return f"invalid arguments for {DELEGATE_TOOL_NAME}: arguments.task: must not be blank"
    return DelegationRequest(task=task, context=context, rollout_index=rollout_index, call_id=call_id)


def format_subtask_result(result: SubtaskResult) -> str:
    """The text of the tool message M reads: S's findings and evidence, never S's transcript."""
    if not result.ok:
        return f"Error: the sub-agent returned no result ({result.error})"
    return json.dumps({"findings": result.findings, "evidence": list(result.evidence)}, ensure_ascii=False)
