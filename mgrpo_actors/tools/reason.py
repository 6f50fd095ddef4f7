"""`reason`: the main agent hands a self-contained reasoning problem to a configured model.

The model is an injected callable `generate(prompt) -> str` (a rollout engine, an HTTP client, ...),
so this module knows no engine. A missing callable, one that raises, or one that returns no text each
give an error result that says which, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mgrpo_actors.tools.base import SchemaTool, ToolOutput

__all__ = ["DEFAULT_REASON_PROMPT", "ReasonTool"]

MAX_PROBLEM_CHARS = 8000
DEFAULT_REASON_PROMPT = (
    "Solve the following problem. Reason step by step, then give the final result on the last line, "
    "starting with 'Result:'.\n\nProblem:\n{problem}"
)


class ReasonTool(SchemaTool):
    """Sends `problem` to a reasoning model and returns its reply, truncated."""

    name = "reason"
    description = (
        "Delegate a reasoning problem (arithmetic, logic, comparing or combining facts you already have) to a "
        "reasoning model. State the problem completely: the model sees nothing else."
    )
    parameters = {
        "type": "object",
        "properties": {
            "problem": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_PROBLEM_CHARS,
                "description": "the complete problem, with every fact it needs",
            }
        },
        "required": ["problem"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        generate: Callable[[str], str] | None = None,
        prompt_template: str = DEFAULT_REASON_PROMPT,
        max_output_chars: int = 4000,
    ) -> None:
        """generate: the model call (None until an engine is plugged in); prompt_template has {problem}."""
        super().__init__()
        if "{problem}" not in prompt_template:
            raise ValueError("prompt_template must contain '{problem}'")
        self.generate = generate
        self.prompt_template = prompt_template
        self.max_output_chars = max_output_chars

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        problem = arguments["problem"].strip()
        if not problem:
            return ToolOutput.failure("invalid arguments for reason: arguments.problem: must not be blank")
        if self.generate is None:
            return ToolOutput.failure("reason is not available: no reasoning model is configured")
        prompt = self.prompt_template.replace("{problem}", problem)
        try:
            reply = self.generate(prompt)
        except Exception as exc:  # the model's failure is this call's failure, not the rollout's
            return ToolOutput.failure(f"reasoning model failed: {type(exc).__name__}: {exc}")
        if not isinstance(reply, str):
            return ToolOutput.failure(f"reasoning model returned {type(reply).__name__}, not text")
        if not reply.strip():
            return ToolOutput.failure("reasoning model returned an empty reply")
        if len(reply) > self.max_output_chars:
            reply = reply[: self.max_output_chars] + "\n[truncated]"
        return ToolOutput.success(reply.strip())
