"""Tool actors: serve `mgrpo.<run>.tool.<name>` requests in a queue group per tool.

Start more `--role tool` processes anywhere to add tool throughput: every actor of a tool, in any
process, joins the same queue group, so NATS spreads the requests (design.md §How people use it).
A bad call is an error ToolResult for the agent, never a lost rollout.
"""

from __future__ import annotations

from typing import Any

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.config.node import BUILTIN_TOOLS
from mgrpo_actors.envs.dataset import resolve_pages
from mgrpo_actors.envs.pages import Page, build_pages
from mgrpo_actors.envs.world import WorldConfig, generate_world
from mgrpo_actors.runtime import Bus, BusActor, Delivery
from mgrpo_actors.tools.registry import ToolRegistry
from protocols import ToolRequest, ToolResult

__all__ = ["ToolActor", "build_tool_registry", "served_pages", "start_tool_actors"]


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
            return ToolResult(call_id=request.call_id, ok=False, content="", error=f"request for tool {request.tool!r} sent to {self.tool!r}")
        result = self.registry.call(self.tool, request.arguments)
        return ToolResult(call_id=request.call_id, ok=result.ok, content=result.content, error=result.error)


def served_pages(config: NodeConfig) -> list[Page]:
    """The pages search and visit serve: `tools.pages` if set, else the built-in synthetic web's."""
    if config.tools.pages is not None:
        return resolve_pages(config.tools.pages)
    # Only the world and its pages: the questions are not needed to serve tools.
    return build_pages(generate_world(WorldConfig(seed=config.tools.web_seed, num_entities=config.tools.web_entities)))


def build_tool_registry(config: NodeConfig) -> ToolRegistry:
    """The tools `config.tools.serve` names: built-ins over the synthetic web (or a pages file), plus extras."""
    tools = config.tools  # names were checked when the config loaded (ToolsConfig)
    builtin = [name for name in tools.serve if name in BUILTIN_TOOLS]
    pages = served_pages(config) if builtin else []
    entries = [{"name": name, "factory": BUILTIN_TOOLS[name]} for name in builtin]
    entries += [entry for entry in tools.extra if entry.get("name") in tools.serve]
    return ToolRegistry.from_config(entries, extra_args={name: {"pages": pages} for name in builtin})


def start_tool_actors(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """Start `actors_per_tool` actors per served tool, appending each to `started`."""
    registry = build_tool_registry(config)
    for name in config.tools.serve:
        for index in range(config.tools.actors_per_tool):
            started.append(ToolActor.start_ready(bus, registry, name, index))
