"""bus_tool_executor: agents' tool calls served by real tool actors over a real nats-server."""

from __future__ import annotations

import pytest

from actors.tool import ToolActor
from mgrpo_actors.agents.episode import ToolCall
from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.envs.pages import build_pages
from mgrpo_actors.envs.world import WorldConfig, generate_world
from mgrpo_actors.rollout.driver import registry_executor
from mgrpo_actors.rollout.tool_calls import bus_tool_executor
from mgrpo_actors.tools.base import ToolOutput
from mgrpo_actors.tools.registry import ToolRegistry
from mgrpo_actors.tools.setup import build_tool_registry

pytestmark = pytest.mark.integration


class EchoTool:
    """A local tool, to check calls of non-remote tools stay in-process."""

    name = "echo"
    description = "echo"
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def __call__(self, arguments: dict) -> ToolOutput:
        return ToolOutput.success(f"echo: {arguments['text']}")


@pytest.fixture
def tool_actors(bus, make_bus, actors, run_id):
    config = load_config(NodeConfig, None, [f"run.id={run_id}", "tools.web_entities=120"])
    registry = build_tool_registry(config.tools)
    server_bus = make_bus("tools")
    for name in ("search", "visit"):
        actors.append(ToolActor.start_ready(server_bus, registry, name))
    return registry


def test_remote_local_and_unserved_calls_each_get_their_result_in_order(bus, tool_actors):
    page = build_pages(generate_world(WorldConfig(seed=0, num_entities=120)))[3]  # the world the tool actors serve
    local = ToolRegistry()
    local.register(EchoTool())
    execute = bus_tool_executor(bus, remote={"search", "visit", "nobody"}, local=registry_executor(local), timeout_s=2)
    calls = [
        ToolCall("r0.t0", "search", {"query": "city"}),
        ToolCall("r0.t1", "echo", {"text": "hi"}),
        ToolCall("r0.t2", "visit", {"url": "file:///etc/passwd", "goal": "x"}),
        ToolCall("r0.t3", "nobody", {}),
        ToolCall("r0.t4", "search", {"k": "not a number"}),
        ToolCall("r0.t5", "visit", {"url": page.url, "goal": "read it"}),
    ]
    results = execute(calls)
    assert len(results) == len(calls)
    assert results[0].ok and "synth://wiki/" in results[0].content
    assert results[1] == ToolOutput.success("echo: hi")
    assert not results[2].ok and "synth://wiki/" in results[2].error  # visit refuses non-world urls
    assert not results[3].ok and "no responders" in results[3].error
    assert not results[4].ok and results[4].error  # bad arguments: an error result, not an exception
    assert results[5].ok and page.title in results[5].content


def test_without_a_local_executor_non_remote_tools_are_errors(bus):
    execute = bus_tool_executor(bus, remote={"search"}, local=None)
    [result] = execute([ToolCall("r0.t0", "reason", {"problem": "1+1"})])
    assert not result.ok and "not served here" in result.error
