"""The tools a config names, built once: the pages search and visit serve, and the registry of every
served tool (built-ins over the synthetic web or a pages file, plus `tools.extra` by import path)."""

from __future__ import annotations

from mgrpo_actors.config.node import BUILTIN_TOOLS, ToolsConfig
from mgrpo_actors.envs.dataset import resolve_pages
from mgrpo_actors.envs.pages import Page, build_pages
from mgrpo_actors.envs.world import WorldConfig, generate_world
from mgrpo_actors.tools.registry import ToolRegistry

__all__ = ["build_tool_registry", "served_pages"]

# The built-in tools that serve pages (the others, like the calculator, take none), and the keyword arguments
# built-in tools take from the config besides the pages.
_PAGE_TOOLS = ("search", "visit")
_BUILTIN_ARGS = {
    "search": lambda tools: {"default_k": tools.search_results, "snippet_chars": tools.snippet_chars},
    "visit": lambda tools: {"max_chars": tools.visit_max_chars},
}


def served_pages(tools: ToolsConfig) -> list[Page]:
    """The pages search and visit serve: `tools.pages` if set, else the built-in synthetic web's."""
    if tools.pages is not None:
        return resolve_pages(tools.pages)
    # Only the world and its pages: the questions are not needed to serve tools.
    return build_pages(generate_world(WorldConfig(seed=tools.web_seed, num_entities=tools.web_entities)))


def build_tool_registry(
    tools: ToolsConfig, names: list[str] | None = None, pages: list[Page] | None = None
) -> ToolRegistry:
    """The tools `names` (default `tools.serve`); pages are built once here unless given."""
    names = list(tools.serve if names is None else names)  # names were checked when the config loaded
    builtin = [name for name in names if name in BUILTIN_TOOLS]
    if pages is None and any(name in _PAGE_TOOLS for name in builtin):
        pages = served_pages(tools)
    entries = [{"name": name, "factory": BUILTIN_TOOLS[name]} for name in builtin]
    entries += [entry for entry in tools.extra if entry.get("name") in names]
    extra_args = {
        name: {**({"pages": pages} if name in _PAGE_TOOLS else {}), **_BUILTIN_ARGS.get(name, lambda _: {})(tools)}
        for name in builtin
    }
    return ToolRegistry.from_config(entries, extra_args=extra_args)
