"""Delegation, M's call-return protocol with S (docs/method.md §The system being trained): M calls the `delegate`
tool with `{task, context}`, a sub-agent works on it, and M reads back only S's structured result.

A run with several sub-agent types (agents.subs) gives M one delegate tool per type, `delegate_<type>`, each
described from config (`Delegates`); a request carries the type it goes to. With one type the tool is `delegate`.

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
from protocols.subjects import DEFAULT_SUB_TYPE

__all__ = [
    "DELEGATE_TOOL_NAME",
    "ONE_TYPE",
    "Delegate",
    "DelegateTool",
    "Delegates",
    "DelegationRequest",
    "delegation_request",
    "format_subtask_result",
]

DELEGATE_TOOL_NAME = "delegate"
# What M's delegate tool says of the default sub-agent type (and of a type whose config gives no description).
DEFAULT_DESCRIPTION = (
    "Give a research subtask to a sub-agent that can search and read web pages. It returns a JSON object "
    "with its findings and the urls of its evidence. It sees nothing but the task and the context you give."
)
MAX_TASK_CHARS = 1000
MAX_CONTEXT_CHARS = 3000


@dataclass(frozen=True)
class DelegationRequest:
    """One `delegate` call of M, addressed so the result finds its way back."""

    task: str  # what S should find out, self-contained
    context: str  # what M already knows that S may need ("" if nothing)
    rollout_index: int  # which of the K rollouts of the query made the call
    call_id: str  # unique within the query; names S's trajectory for alignment
    sub_type: str = DEFAULT_SUB_TYPE  # the sub-agent type the call goes to (the delegate tool M called)


Delegate = Callable[[Sequence[DelegationRequest]], list[SubtaskResult]]


class DelegateTool(SchemaTool):
    """One of M's delegate tools as the prompt lists it and as its arguments are validated: `delegate` (the one
    sub-agent type), or `delegate_<type>` with the type's description.

    A rollout never calls it: the driver sends delegations to the `Delegate` callback in batches, which
    is what lets the pipeline route them over NATS. Called directly, it answers with that explanation.
    """

    name = DELEGATE_TOOL_NAME
    description = DEFAULT_DESCRIPTION
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

    def __init__(self, name: str = DELEGATE_TOOL_NAME, description: str = DEFAULT_DESCRIPTION) -> None:
        self.name, self.description = name, description
        super().__init__()

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        return ToolOutput.failure(
            f"{self.name} is answered by a sub-agent through the rollout driver, not called directly"
        )


def _typed_description(sub_type: str, description: str | None) -> str:
    what = description.strip().rstrip(".") if description else "it can search and read web pages"
    return (
        f"Give a subtask to the {sub_type} sub-agent: {what}. It returns a JSON object with its findings (and "
        "the urls of any pages it used). It sees nothing but the task and the context you give."
    )


@dataclass(frozen=True)
class Delegates:
    """M's delegate tools, by tool name, and the sub-agent type each goes to."""

    tools: tuple[DelegateTool, ...]
    types: dict[str, str]  # tool name -> sub-agent type
    example: str | None  # the tool M's worked example delegates a web lookup with (None: no type reads the web)

    @classmethod
    def of(cls, sub_types: dict[str, str | None], readers: tuple[str, ...] | None = None) -> Delegates:
        """The delegate tools of a run whose sub-agent types (in config order) are described as given (None: not
        described): one type has `delegate` (described as the default type is, unless its config says otherwise);
        several have `delegate_<type>` each. `readers`: the types that search and read the web (None: every type);
        the worked example delegates to the first of them."""
        if not sub_types:
            raise ValueError("a run with delegation has at least one sub-agent type")
        if len(sub_types) == 1:
            ((sub_type, description),) = sub_types.items()
            text = DEFAULT_DESCRIPTION if description is None else _typed_description(sub_type, description)
            tools = (DelegateTool(DELEGATE_TOOL_NAME, text),)
        else:
            tools = tuple(
                DelegateTool(f"{DELEGATE_TOOL_NAME}_{t}", _typed_description(t, d)) for t, d in sub_types.items()
            )
        types = {tool.name: sub_type for tool, sub_type in zip(tools, sub_types, strict=True)}
        example = next((name for name, t in types.items() if readers is None or t in readers), None)
        return cls(tools, types, example)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)


# The delegate tool of a run with the one default sub-agent type.
ONE_TYPE = Delegates.of({DEFAULT_SUB_TYPE: None})


def delegation_request(
    arguments: dict[str, Any],
    rollout_index: int,
    call_id: str,
    sub_type: str = DEFAULT_SUB_TYPE,
    tool_name: str = DELEGATE_TOOL_NAME,
) -> DelegationRequest | str:
    """The request the arguments of M's call of delegate tool `tool_name` (to `sub_type`) make, or the error M
    should read instead."""
    errors = validate(arguments, DelegateTool.parameters)
    if errors:
        return f"invalid arguments for {tool_name}: " + "; ".join(errors)
    task, context = arguments["task"].strip(), arguments.get("context", "").strip()
    if not task:
        return f"invalid arguments for {tool_name}: arguments.task: must not be blank"
    return DelegationRequest(
        task=task, context=context, rollout_index=rollout_index, call_id=call_id, sub_type=sub_type
    )


def format_subtask_result(result: SubtaskResult) -> str:
    """The text of the tool message M reads: S's findings and evidence, never S's transcript."""
    if not result.ok:
        return f"Error: the sub-agent returned no result ({result.error})"
    return json.dumps({"findings": result.findings, "evidence": list(result.evidence)}, ensure_ascii=False)
