"""The tool registry: built from config by import path; `call` never raises, whatever it is given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgrpo_actors.envs.dataset import write_pages
from mgrpo_actors.envs.questions import QuestionConfig
from mgrpo_actors.envs.synthetic_web import SyntheticWebConfig, build_synthetic_web
from mgrpo_actors.envs.world import WorldConfig
from mgrpo_actors.tools.base import SchemaTool, ToolOutput
from mgrpo_actors.tools.reason import ReasonTool
from mgrpo_actors.tools.registry import ToolConfigError, ToolRegistry, ToolSpec, schemas_for_prompt
from mgrpo_actors.tools.search import SearchTool

CONFIG = SyntheticWebConfig(world=WorldConfig(seed=4, num_entities=120), questions=QuestionConfig(num_questions=5))


@pytest.fixture(scope="module")
def pages_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("web") / "pages.jsonl"
    write_pages(path, build_synthetic_web(CONFIG).pages)
    return path


@pytest.fixture(scope="module")
def registry(pages_path: Path) -> ToolRegistry:
    entries = [
        {
            "name": "search",
            "factory": "mgrpo_actors.tools.search:SearchTool",
            "args": {"pages": str(pages_path), "max_k": 10},
        },
        {"name": "visit", "factory": "mgrpo_actors.tools.visit:VisitTool", "args": {"pages": str(pages_path)}},
        ToolSpec(name="reason", factory="mgrpo_actors.tools.reason:ReasonTool"),
    ]
    return ToolRegistry.from_config(entries, extra_args={"reason": {"generate": lambda prompt: "Result: 4"}})


class Exploding:
    """A third-party tool that does not follow the never-raise rule."""

    name = "explode"
    description = "raises"
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    def __call__(self, arguments: dict[str, Any]) -> ToolOutput:
        raise RuntimeError("boom")


class WrongReturn(Exploding):
    name = "wrong"

    def __call__(self, arguments: dict[str, Any]) -> ToolOutput:
        return "plain text"  # type: ignore[return-value]


class BuggySchemaTool(SchemaTool):
    name = "buggy"
    description = "run raises"

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        raise KeyError("missing")


def test_registry_built_from_config_calls_each_tool(registry: ToolRegistry) -> None:
    assert registry.names == ["search", "visit", "reason"]
    found = registry.call("search", {"query": "organisation", "k": 2})
    assert found.ok and found.content.count("synth://wiki/") == 2
    url = found.content.split("\n")[2].strip()
    assert registry.call("visit", {"url": url, "goal": "g"}).ok
    assert registry.call("reason", {"problem": "2+2"}).content == "Result: 4"
    assert registry.call("search", '{"query": "organisation"}').ok  # arguments as JSON text


def test_factory_args_reach_the_tool(registry: ToolRegistry) -> None:
    result = registry.call("search", {"query": "a", "k": 11})
    assert not result.ok and "arguments.k: must be <= 10" in (result.error or "")


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("browse", {}, "unknown tool 'browse'; known tools: search, visit, reason"),
        (None, {}, "unknown tool None"),
        (["search"], {}, "unknown tool ['search']"),
        ("search", "{query: x}", "arguments for search are not valid JSON"),
        ("search", "[1, 2]", "arguments for search must be a JSON object, got list"),
        ("search", None, "must be a JSON object, got NoneType"),
        ("search", {"query": 1}, "invalid arguments for search: arguments.query: expected string"),
        ("visit", {"url": "file:///etc/passwd", "goal": "g"}, "only synth://wiki/... urls"),
        ("visit", {"url": "http://evil.example/", "goal": "g"}, "only synth://wiki/... urls"),
    ],
)
def test_bad_calls_are_error_results(registry: ToolRegistry, name: Any, arguments: Any, message: str) -> None:
    result = registry.call(name, arguments)
    assert isinstance(result, ToolOutput) and not result.ok
    assert result.error is not None and message in result.error


def test_misbehaving_tools_are_contained() -> None:
    registry = ToolRegistry()
    for tool in (Exploding(), WrongReturn(), BuggySchemaTool()):
        registry.register(tool)
    assert "tool 'explode' failed: RuntimeError: boom" in (registry.call("explode", {}).error or "")
    assert "returned str, not a ToolOutput" in (registry.call("wrong", {}).error or "")
    assert "buggy failed: KeyError" in (registry.call("buggy", {}).error or "")


@pytest.mark.parametrize(
    ("entries", "extra", "message"),
    [
        ([{"name": "s", "factory": "no_such_module:X"}], None, "cannot import module 'no_such_module'"),
        ([{"name": "s", "factory": "mgrpo_actors.tools.search:Nope"}], None, "has no attribute 'Nope'"),
        (
            [{"name": "s", "factory": "mgrpo_actors.tools.search.SearchTool"}],
            None,
            "must look like 'package.module:attribute'",
        ),
        ([{"factory": "mgrpo_actors.tools.reason:ReasonTool"}], None, "'name' must be a non-empty string"),
        (
            [{"name": "r", "factory": "mgrpo_actors.tools.reason:ReasonTool", "kwargs": {}}],
            None,
            "unknown keys ['kwargs']",
        ),
        (
            [{"name": "r", "factory": "mgrpo_actors.tools.reason:ReasonTool", "args": []}],
            None,
            "'args' must be a mapping",
        ),
        (
            [{"name": "s", "factory": "mgrpo_actors.tools.search:SearchTool", "args": {"pages": "/nonexistent.jsonl"}}],
            None,
            "tool 's': mgrpo_actors.tools.search:SearchTool(...) failed: DatasetError: cannot open",
        ),
        (
            [{"name": "r", "factory": "mgrpo_actors.tools.reason:ReasonTool", "args": {"colour": 1}}],
            None,
            "unexpected keyword",
        ),
        ([{"name": "r", "factory": "mgrpo_actors.tools.reason:ReasonTool"}] * 2, None, "registered twice"),
        (
            [{"name": "r", "factory": "mgrpo_actors.tools.reason:ReasonTool"}],
            {"web": {}},
            "extra_args for tools not in the config: ['web']",
        ),
        ([{"name": "j", "factory": "json:dumps", "args": {"obj": 1}}], None, "lacks name/description/parameters"),
    ],
)
def test_config_errors_are_clear(entries: list, extra: Any, message: str) -> None:
    with pytest.raises(ToolConfigError) as info:
        ToolRegistry.from_config(entries, extra_args=extra)
    assert message in str(info.value)


def test_tool_with_an_unsupported_schema_is_refused() -> None:
    class Patterned(Exploding):
        name = "patterned"
        parameters = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^a"}}}

    with pytest.raises(ToolConfigError, match="unsupported keywords \\['pattern'\\]"):
        ToolRegistry().register(Patterned())


def test_get_and_subset(registry: ToolRegistry) -> None:
    sub = registry.subset(["search", "visit"])
    assert sub.names == ["search", "visit"] and "reason" not in sub
    with pytest.raises(KeyError, match="unknown tool 'web'; known tools: search, visit, reason"):
        registry.get("web")


def test_schemas_for_prompt_lists_every_tool(registry: ToolRegistry) -> None:
    text = schemas_for_prompt(registry)
    block = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    schemas = [json.loads(line) for line in block.split("\n")]
    assert [s["name"] for s in schemas] == registry.names
    assert schemas[0]["parameters"]["properties"]["k"]["maximum"] == 10
    assert all(s["description"] and s["parameters"]["type"] == "object" for s in schemas)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
argument_objects = st.dictionaries(
    st.sampled_from(["query", "k", "url", "goal", "problem", "x"]) | st.text(max_size=6), json_values, max_size=4
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["search", "visit", "reason", "nope"]) | st.text(max_size=8),
    arguments=argument_objects | json_values | st.text(max_size=40),
)
def test_call_never_raises_on_any_arguments(registry: ToolRegistry, name: Any, arguments: Any) -> None:
    result = registry.call(name, arguments)
    assert isinstance(result, ToolOutput)
    assert result.ok == (result.error is None)
    assert result.ok or (isinstance(result.error, str) and result.error)


def test_search_tool_satisfies_the_tool_protocol(pages_path: Path) -> None:
    registry = ToolRegistry()
    registry.register(SearchTool(pages_path), name="web_search")  # one class, any name
    registry.register(ReasonTool())
    assert registry.names == ["web_search", "reason"]
    assert registry.call("web_search", {"query": "city"}).ok
    assert "no reasoning model is configured" in (registry.call("reason", {"problem": "p"}).error or "")
