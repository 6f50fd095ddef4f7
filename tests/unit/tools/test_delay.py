"""`delay`: waits its latency and echoes its text, refuses a bad latency when built, is named by config
(as `mgrpo bench tools` names it), and waits without holding the GIL (it stands in for I/O)."""

from __future__ import annotations

import threading
import time

import pytest

from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.tools.delay import DelayTool
from mgrpo_actors.tools.registry import ToolConfigError, ToolRegistry
from mgrpo_actors.tools.setup import build_tool_registry

ENTRY = {"name": "delay", "factory": "mgrpo_actors.tools.delay:DelayTool", "args": {"latency_s": 0.02}}


def test_delay_waits_its_latency_and_returns_the_text() -> None:
    tool = DelayTool(latency_s=0.02)
    start = time.perf_counter()
    result = tool({"text": "héllo"})
    assert time.perf_counter() - start >= 0.02
    assert result.ok and result.content == "héllo" and result.error is None


def test_zero_latency_is_a_plain_echo() -> None:
    assert DelayTool(0)({"text": ""}).content == ""


@pytest.mark.parametrize("latency", [-0.001, float("nan"), float("inf"), "0.05", True, None])
def test_a_bad_latency_is_refused_when_built(latency: object) -> None:
    with pytest.raises(ValueError, match="latency_s must be"):
        DelayTool(latency)  # type: ignore[arg-type]


@pytest.mark.parametrize("arguments", [{}, {"text": 3}, {"text": "a", "other": 1}])
def test_bad_arguments_are_error_results(arguments: dict) -> None:
    result = DelayTool(0)(arguments)
    assert not result.ok and result.error and "invalid arguments for delay" in result.error


def test_registry_builds_it_from_a_config_entry() -> None:
    registry = ToolRegistry.from_config([ENTRY])
    assert registry.names == ["delay"]
    assert registry.call("delay", '{"text": "x"}').content == "x"
    with pytest.raises(ToolConfigError, match="latency_s must be"):
        ToolRegistry.from_config([{**ENTRY, "args": {"latency_s": -1}}])


def test_a_node_config_serves_it_through_tools_extra() -> None:
    # The same overrides `mgrpo bench tools` gives each `mgrpo-node --role tool`.
    config = load_config(
        NodeConfig,
        None,
        [
            "tools.serve=[delay]",
            'tools.extra=[{name: delay, factory: "mgrpo_actors.tools.delay:DelayTool", args: {latency_s: 0.02}}]',
        ],
    )
    registry = build_tool_registry(config.tools)
    assert registry.names == ["delay"] and registry.call("delay", {"text": "y"}).content == "y"


def test_calls_in_threads_overlap() -> None:
    tool, threads = DelayTool(0.2), 4
    workers = [threading.Thread(target=tool, args=({"text": "t"},)) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert time.perf_counter() - start < 0.2 * threads * 0.75  # serialised would take 0.8 s
