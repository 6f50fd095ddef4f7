"""`search`: BM25 (bm25s) over the synthetic web's pages; returns the top-k titles, urls and snippets."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import bm25s
import numpy as np
from bm25s.tokenization import Tokenizer

from mgrpo_actors.envs.dataset import resolve_pages
from mgrpo_actors.envs.pages import Page
from mgrpo_actors.tools.base import SchemaTool, ToolOutput

__all__ = ["SearchTool"]

MAX_QUERY_CHARS = 500
TITLE_WEIGHT = 3  # the title is indexed this many times, so a page ranks first for its own name


class SearchTool(SchemaTool):
    """BM25 search over a fixed set of pages."""

    name = "search"
    description = "Search the web. Returns the top-k pages (title, url, snippet) for a keyword query."

    def __init__(
        self,
        pages: Sequence[Page] | str | os.PathLike[str],
        default_k: int = 5,
        max_k: int = 20,
        snippet_chars: int = 200,
    ) -> None:
        """pages: the pages, or the path of a pages.jsonl; k is capped at max_k; snippets at snippet_chars."""
        self.pages = resolve_pages(pages)
        if not self.pages:
            raise ValueError("search needs at least one page")
        if not 1 <= default_k <= max_k:
            raise ValueError(f"need 1 <= default_k <= max_k, got default_k={default_k}, max_k={max_k}")
        self.default_k, self.max_k, self.snippet_chars = default_k, max_k, snippet_chars
        self.parameters = {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARS,
                    "description": "keywords to search for",
                },
                "k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": max_k,
                    "description": f"number of results (default {default_k})",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        }
        super().__init__()
        self._tokenizer = Tokenizer(stopwords="en")
        corpus = [" ".join([p.title] * TITLE_WEIGHT + [p.text]) for p in self.pages]
        self._bm25 = bm25s.BM25()
        self._bm25.index(self._tokenizer.tokenize(corpus, show_progress=False), show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every page for `query` (all zeros when no query word is in the index)."""
        ids = self._tokenizer.tokenize([query], update_vocab=False, show_progress=False)[0]
        return np.asarray(self._bm25.get_scores(ids), dtype=np.float64)

    def _snippet(self, page: Page) -> str:
        first = page.text.split("\n", 1)[0]
        return first if len(first) <= self.snippet_chars else first[: self.snippet_chars - 3].rstrip() + "..."

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        query, k = arguments["query"], arguments.get("k", self.default_k)
        if not query.strip():
            return ToolOutput.failure("invalid arguments for search: arguments.query: must not be blank")
        scores = self.scores(query)
        # Stable sort: equal scores keep page order, so results are deterministic.
        ranked = [int(i) for i in np.argsort(-scores, kind="stable")[:k] if scores[i] > 0]
        if not ranked:
            return ToolOutput.success(f"No results for {query!r}.")
        lines = [f"Results for {query!r}:"]
        for rank, i in enumerate(ranked, start=1):
            page = self.pages[i]
            lines.append(f"{rank}. {page.title}\n   {page.url}\n   {self._snippet(page)}")
        return ToolOutput.success("\n".join(lines))
