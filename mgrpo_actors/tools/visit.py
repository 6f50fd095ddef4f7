"""`visit`: read one page of the synthetic web by url, truncated; nothing else is ever read.

Urls are looked up in an in-memory dict of the world's pages and nowhere else: a `file://`, `http://`
or path-like url is an error result, never a file or network read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from mgrpo_actors.envs.dataset import resolve_pages
from mgrpo_actors.envs.pages import Page
from mgrpo_actors.envs.world import URL_PREFIX
from mgrpo_actors.tools.base import SchemaTool, ToolOutput

__all__ = ["VisitTool"]

MAX_URL_CHARS = 300
MAX_GOAL_CHARS = 1000


class VisitTool(SchemaTool):
    """Returns a page's text for a url of the world, with the caller's goal echoed above it."""

    name = "visit"
    description = (
        "Read a web page. Give the page's url (from search results or links on other pages) and your goal: "
        "what you want to find on it."
    )
    parameters = {
        "type": "object",
        "properties": {
            "url": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_URL_CHARS,
                "description": f"page url, e.g. {URL_PREFIX}some-page",
            },
            "goal": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_GOAL_CHARS,
                "description": "what information you are looking for on this page",
            },
        },
        "required": ["url", "goal"],
        "additionalProperties": False,
    }

    def __init__(self, pages: Sequence[Page] | str | os.PathLike[str], max_chars: int = 4000) -> None:
        """pages: the pages, or the path of a pages.jsonl; page text past max_chars is cut."""
        super().__init__()
        if max_chars < 1:
            raise ValueError(f"max_chars must be positive, got {max_chars}")
        self.max_chars = max_chars
        self._pages = {p.url: p for p in resolve_pages(pages)}

    def _unknown(self, url: str) -> ToolOutput:
        if not url.startswith(URL_PREFIX):
            reason = f"only {URL_PREFIX}... urls can be visited"
        else:
            reason = "no page has this url; use a url from search results or page links"
        return ToolOutput.failure(f"cannot visit {url[:100]!r}: {reason}")

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        url, goal = arguments["url"].strip(), arguments["goal"].strip()
        if not goal:
            return ToolOutput.failure("invalid arguments for visit: arguments.goal: must not be blank")
        page = self._pages.get(url)
        if page is None:
            return self._unknown(url)
        text = page.text
        if len(text) > self.max_chars:
            text = text[: self.max_chars] + f"\n[truncated: showing {self.max_chars} of {len(page.text)} characters]"
        return ToolOutput.success(f"Title: {page.title}\nURL: {page.url}\nGoal: {goal}\n\n{text}")
