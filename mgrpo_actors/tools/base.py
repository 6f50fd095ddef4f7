"""What a tool is: a name, a description, a JSON schema for its arguments, and a call that never raises.

A bad call (wrong arguments, unknown url, failing model) is an `ok=False` ToolOutput with an error the
agent can read and recover from; an exception would end the rollout. `SchemaTool` gives a tool argument
validation and that guarantee, so a subclass writes only `run` for arguments already checked.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import structlog

from mgrpo_actors.tools.schema import check_schema, validate

__all__ = ["SchemaTool", "Tool", "ToolOutput"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ToolOutput:
    """The outcome of one tool call, as the agent will see it."""

    ok: bool  # the call did what was asked
    content: str  # the result text ("" on failure)
    error: str | None = None  # why the call failed, phrased for the agent; None when ok

    @classmethod
    def success(cls, content: str) -> ToolOutput:
        return cls(ok=True, content=content, error=None)

    @classmethod
    def failure(cls, error: str) -> ToolOutput:
        return cls(ok=False, content="", error=error)


@runtime_checkable
class Tool(Protocol):
    """Anything the registry can call; `__call__` must return a ToolOutput, never raise."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object

    def __call__(self, arguments: dict[str, Any]) -> ToolOutput: ...


class SchemaTool(ABC):
    """A tool whose arguments are validated against `parameters` before `run` sees them."""

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self) -> None:
        check_schema(self.parameters, f"tool {self.name!r} parameters")

    @abstractmethod
    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        """Do the work for arguments that already match `parameters`."""

    def __call__(self, arguments: dict[str, Any]) -> ToolOutput:
        errors = validate(arguments, self.parameters)
        if errors:
            return ToolOutput.failure(f"invalid arguments for {self.name}: " + "; ".join(errors))
        try:
            return self.run(arguments)
        except Exception as exc:  # a tool bug must cost one call, not the rollout
            log.warning("tool raised", tool=self.name, error=repr(exc))
            return ToolOutput.failure(f"{self.name} failed: {type(exc).__name__}: {exc}")
