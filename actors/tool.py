"""Tool actors: serve `mgrpo.<run>.tool.<name>` requests in a queue group per tool.

Start more `--role tool` processes anywhere to add tool throughput: every actor of a tool, in any
process, joins the same queue group, so NATS spreads the requests (docs/architecture.md §How people use it).
A bad call is an error ToolResult for the agent, never a lost rollout.
"""

from __future__ import annotations

from typing import Any

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.rollout.wire import tool_output_to_wire
from mgrpo_actors.runtime import Bus, BusActor, Delivery
from mgrpo_actors.tools.base import ToolOutput
from mgrpo_actors.tools.registry import ToolRegistry
from mgrpo_actors.tools.setup import build_tool_registry
from protocols import ToolRequest, ToolResult

__all__ = ["ToolActor", "start_tool_actors"]


class ToolActor(BusActor):
    """Serves one tool; several of them (in any process) share the tool's queue group."""

    role = "tool"

    def __init__(self, bus: Bus, registry: ToolRegistry, tool: str, index: int = 0) -> None:
        super().__init__(bus, name=f"tool-{tool}-{bus.node}-{index}")
        self.registry = registry
        self.tool = tool

    def on_start(self) -> None:
        super().on_start()
        self.listen(self.bus.subjects.tool(self.tool), queue=f"tool-{self.tool}")

    def handlers(self) -> dict:
        return {ToolRequest: self.on_request}

    def on_request(self, request: ToolRequest, delivery: Delivery) -> ToolResult:
        # The subject says which tool; a request naming another one is a caller bug worth telling.
        if request.tool != self.tool:
            return tool_output_to_wire(
                request.call_id,
                ToolOutput.failure(f"request for tool {repr(request.tool)[:100]} sent to {self.tool!r}"),
            )
        return tool_output_to_wire(request.call_id, self.registry.call(self.tool, request.arguments))


def start_tool_actors(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """Start `actors_per_tool` actors per served tool, appending each to `started`."""
    registry = build_tool_registry(config.tools)
    for name in config.tools.serve:
        for index in range(config.tools.actors_per_tool):
            started.append(ToolActor.start_ready(bus, registry, name, index))
