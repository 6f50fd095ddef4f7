"""`search` and `visit` over a generated web: results, and error results for every kind of bad call."""

from __future__ import annotations

import builtins
import socket

import pytest

from mgrpo_actors.config.node import ToolsConfig
from mgrpo_actors.envs.pages import Page
from mgrpo_actors.envs.questions import QuestionConfig
from mgrpo_actors.envs.synthetic_web import SyntheticWeb, SyntheticWebConfig, build_synthetic_web
from mgrpo_actors.envs.world import WorldConfig
from mgrpo_actors.tools.search import SearchTool
from mgrpo_actors.tools.setup import build_tool_registry
from mgrpo_actors.tools.visit import VisitTool

CONFIG = SyntheticWebConfig(world=WorldConfig(seed=2, num_entities=200), questions=QuestionConfig(num_questions=10))


@pytest.fixture(scope="module")
def web() -> SyntheticWeb:
    return build_synthetic_web(CONFIG)


@pytest.fixture(scope="module")
def search(web: SyntheticWeb) -> SearchTool:
    return SearchTool(web.pages, default_k=5, max_k=20)


@pytest.fixture(scope="module")
def visit(web: SyntheticWeb) -> VisitTool:
    return VisitTool(web.pages, max_chars=4000)


def test_search_finds_an_entity_by_name(web: SyntheticWeb, search: SearchTool) -> None:
    hits = 0
    for entity in web.world.entities:
        result = search({"query": entity.name})
        assert result.ok and result.error is None
        hits += result.content.split("\n")[1] == f"1. {entity.name}"
        assert entity.url in result.content
    assert hits >= 0.95 * len(web.world.entities)  # ranked first; shared surnames may push a few down


def test_search_result_shape_and_k(web: SyntheticWeb, search: SearchTool) -> None:
    person = web.world.by_type["person"][0]
    result = search({"query": person.name, "k": 3})
    lines = result.content.split("\n")
    assert lines[0] == f"Results for {person.name!r}:"
    assert [line[:3] for line in lines[1::3]] == ["1. ", "2. ", "3. "]
    assert all(line.strip().startswith("synth://wiki/") for line in lines[2::3])
    assert all(len(line.strip()) <= search.snippet_chars for line in lines[3::3])
    assert len(search({"query": person.name}).content.split("\n")) == 1 + 3 * 5


def test_search_with_no_matching_words_is_an_empty_success(search: SearchTool) -> None:
    for query in ("qqqzzzxxx", "the of and"):
        result = search({"query": query})
        assert result.ok and result.content == f"No results for {query!r}."


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required field 'query'"),
        ({"query": 5}, "arguments.query: expected string"),
        ({"query": ""}, "arguments.query: must have at least 1"),
        ({"query": "   "}, "must not be blank"),
        ({"query": "x" * 501}, "at most 500 characters"),
        ({"query": "a", "k": 10**9}, "arguments.k: must be <= 20"),
        ({"query": "a", "k": 0}, "arguments.k: must be >= 1"),
        ({"query": "a", "k": "5"}, "arguments.k: expected integer, got string"),
        ({"query": "a", "k": True}, "arguments.k: expected integer, got boolean"),
        ({"query": "a", "top": 3}, "unexpected fields ['top']"),
        (["a"], "arguments: expected object"),
    ],
)
def test_search_rejects_bad_arguments(search: SearchTool, arguments: object, message: str) -> None:
    result = search(arguments)  # type: ignore[arg-type]
    assert not result.ok and result.content == ""
    assert (
        result.error is not None and result.error.startswith("invalid arguments for search") and message in result.error
    )


def test_visit_returns_the_page(web: SyntheticWeb, visit: VisitTool) -> None:
    page = web.pages[0]
    result = visit({"url": page.url, "goal": "find the birth year"})
    assert result.ok
    assert result.content == f"Title: {page.title}\nURL: {page.url}\nGoal: find the birth year\n\n{page.text}"


def test_visit_truncates_long_pages(web: SyntheticWeb) -> None:
    page = max(web.pages, key=lambda p: len(p.text))
    short = VisitTool(web.pages, max_chars=100)
    content = short({"url": page.url, "goal": "g"}).content
    assert page.text[:100] in content and page.text[:101] not in content
    assert content.endswith(f"[truncated: showing 100 of {len(page.text)} characters]")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"url": "synth://wiki/no-such-page", "goal": "g"}, "no page has this url"),
        ({"url": "file:///etc/passwd", "goal": "g"}, "only synth://wiki/... urls can be visited"),
        ({"url": "/etc/passwd", "goal": "g"}, "only synth://wiki/... urls can be visited"),
        ({"url": "http://example.com/", "goal": "g"}, "only synth://wiki/... urls can be visited"),
        ({"url": "https://127.0.0.1:4222", "goal": "g"}, "only synth://wiki/... urls can be visited"),
        ({"url": "synth://wiki/../../etc/passwd", "goal": "g"}, "no page has this url"),
        ({"url": "synth://wiki/x"}, "missing required field 'goal'"),
        ({"goal": "g"}, "missing required field 'url'"),
        ({"url": 7, "goal": "g"}, "arguments.url: expected string"),
        ({"url": "synth://wiki/x", "goal": ["g"]}, "arguments.goal: expected string"),
        ({"url": "synth://wiki/x", "goal": " "}, "must not be blank"),
        ({"url": "synth://wiki/" + "a" * 400, "goal": "g"}, "at most 300 characters"),
    ],
)
def test_visit_rejects_bad_arguments_without_touching_files_or_network(
    visit: VisitTool, monkeypatch: pytest.MonkeyPatch, arguments: dict, message: str
) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("visit must not read files or open sockets")

    monkeypatch.setattr(builtins, "open", forbidden)
    monkeypatch.setattr(socket, "socket", forbidden)
    result = visit(arguments)
    assert not result.ok and result.content == ""
    assert result.error is not None and message in result.error


def test_tools_load_pages_from_a_file(web: SyntheticWeb, tmp_path) -> None:
    from mgrpo_actors.envs.dataset import write_pages

    path = tmp_path / "pages.jsonl"
    write_pages(path, web.pages)
    assert VisitTool(str(path))({"url": web.pages[3].url, "goal": "g"}).ok
    assert web.pages[3].url in SearchTool(path)({"query": web.pages[3].title}).content


def test_tool_construction_errors() -> None:
    page = Page("synth://wiki/a", "A", "text", ())
    with pytest.raises(ValueError, match="at least one page"):
        SearchTool([])
    with pytest.raises(ValueError, match="default_k"):
        SearchTool([page], default_k=30, max_k=20)
    with pytest.raises(ValueError, match="max_chars"):
        VisitTool([page], max_chars=0)


def test_the_config_sets_search_results_and_snippets() -> None:
    tools = ToolsConfig(web_entities=150, search_results=2, snippet_chars=40, visit_max_chars=300)
    registry = build_tool_registry(tools)
    search = registry.get("search")
    assert search.parameters["properties"]["k"]["description"] == "number of results (default 2)"  # in the prompt
    found = registry.call("search", {"query": "born"}).content
    snippets = [line.strip() for line in found.splitlines()[1:] if line.startswith("   ") and "://" not in line]
    assert len(snippets) == 2 and all(len(s) <= 40 for s in snippets)
    assert len(registry.call("search", {"query": "born", "k": 4}).content.splitlines()) == 1 + 4 * 3
    with pytest.raises(ValueError, match="tools.search_results"):
        ToolsConfig(search_results=21)
    with pytest.raises(ValueError, match="tools.snippet_chars"):
        ToolsConfig(snippet_chars=0)
