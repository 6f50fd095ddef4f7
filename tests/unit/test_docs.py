"""The documentation stays true to the repository: README.md is short, every relative link in README.md
and docs/ resolves (anchors to existing headings), every page of docs/ is on the map (docs/index.md),
every repository path quoted in the docs exists, no link leaves the repository (arXiv excepted), no
tracked file points at the reference texts the project was specified from, and every section the
Python sources cite (docs/<page>.md §<Section>) is a heading of that page."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from tests.helpers import REPO

DOCS = REPO / "docs"
README = REPO / "README.md"
README_MAX_LINES = 200

# Written in two parts so that this file does not mention it itself.
FORBIDDEN = "shared" + "/docs"

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
URL = re.compile(r"https?://([^/\s)>\]\"'`|]+)[^\s)>\]\"'`|]*")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# A citation in the Python sources: `docs/method.md §Rewards`, `docs/architecture.md §"One training step"`.
CITATION = re.compile(r"docs/([\w./-]+?\.md)\s*§")
# Repository paths quoted in the docs (`mgrpo_actors/algo/rewards.py`): they must exist.
REPO_PATH = re.compile(r"^(?:mgrpo_actors|actors|protocols|tests|deploy|docs)/[\w./-]*$")
GENERATED_PATHS = ("deploy/nats/generated",)  # what `mgrpo deploy nats-config` writes, never committed

# Hosts a URL in the docs may name: the paper's, and addresses that never leave the machine.
ALLOWED_HOSTS = ("arxiv.org", "127.0.0.1", "localhost", "0.0.0.0")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


@cache
def _lines_outside_code(path: Path) -> tuple[tuple[int, str], ...]:
    """(line number, text) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return tuple(out)


def _slug(text: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(2), text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def _headings(path: Path) -> tuple[str, ...]:
    """The text of every heading of a Markdown file, in order."""
    return tuple(m.group(2) for _, line in _lines_outside_code(path) if (m := HEADING.match(line)))


@cache
def _anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading in _headings(path):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return frozenset(anchors)


def _links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link and image outside code."""
    found = []
    for number, line in _lines_outside_code(path):
        text = INLINE_CODE.sub("", line)
        found += [(number, m.group(1)) for m in LINK.finditer(text)]
        found += [(number, m.group(1)) for m in REFERENCE_DEFINITION.finditer(text)]
    return found


def _link_problem(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, does not resolve inside the repository (None when it does)."""
    if SCHEME.match(target):
        host = URL.match(target)
        if host and host.group(1).lower().split(":")[0] in ALLOWED_HOSTS:
            return None
        return "leaves the repository"
    path_part, _, anchor = target.partition("#")
    if path_part.startswith("/"):
        return "is an absolute path (use a relative one)"
    resolved = (page.parent / path_part).resolve() if path_part else page
    if not resolved.is_relative_to(REPO):
        return "points outside the repository"
    if not resolved.exists():
        return "names no file"
    if anchor:
        if resolved.suffix != ".md" or resolved.is_dir():
            return f"has an anchor #{anchor} on something that is not a Markdown page"
        if anchor not in _anchors(resolved):
            return f"names no heading of {_rel(resolved)} (anchors: {', '.join(sorted(_anchors(resolved)))})"
    return None


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


@pytest.mark.parametrize("page", _pages(), ids=_rel)
def test_every_link_resolves_inside_the_repository(page):
    bad = [
        f"{_rel(page)}:{line}: {target} {problem}"
        for line, target in _links(page)
        if (problem := _link_problem(page, target)) is not None
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("page", _pages(), ids=_rel)
def test_no_url_leaves_the_repository(page):
    """Bare URLs count too (GitHub turns them into links), in code or not; arXiv and local addresses
    (an example endpoint on 127.0.0.1, a templated `<addr>`) are the only ones allowed."""
    bad = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for m in URL.finditer(line):
            host = m.group(1).lower().split(":")[0]
            if host in ALLOWED_HOSTS or host.endswith(".arxiv.org") or "<" in host or "&lt;" in host:
                continue
            bad.append(f"{_rel(page)}:{number}: {m.group(0)}")
    assert not bad, "\n".join(bad)


def test_every_page_of_docs_is_on_the_map():
    index = DOCS / "index.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for _, t in _links(index) if not SCHEME.match(t)}
    missing = [_rel(p) for p in sorted(DOCS.rglob("*.md")) if p != index and p.resolve() not in linked]
    assert not missing, f"docs/index.md does not link {missing}"


@pytest.mark.parametrize("page", _pages(), ids=_rel)
def test_quoted_repository_paths_exist(page):
    bad = []
    for number, line in _lines_outside_code(page):
        for m in INLINE_CODE.finditer(line):
            path = m.group(2).strip()
            if not REPO_PATH.match(path) or path.startswith(GENERATED_PATHS):
                continue
            if not (REPO / path).exists():
                bad.append(f"{_rel(page)}:{number}: `{path}` does not exist")
    assert not bad, "\n".join(bad)


@cache
def _tracked(*patterns: str) -> tuple[str, ...]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", *patterns], cwd=REPO, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout: {exc}")
    return tuple(name for name in out.decode().split("\0") if name and (REPO / name).is_file())


def test_no_tracked_file_mentions_the_specification_texts():
    needle = FORBIDDEN.encode()
    bad = [name for name in _tracked() if needle in (REPO / name).read_bytes()]
    assert not bad, f"these tracked files mention {FORBIDDEN!r}: {bad}"


def _cited_section(rest: str, headings: tuple[str, ...]) -> str | None:
    """The longest heading the text after § starts with (ending at a word boundary), else None."""
    rest = rest.lstrip("\"'")
    fits = [h for h in headings if rest.startswith(h) and (len(rest) == len(h) or not rest[len(h)].isalnum())]
    return max(fits, key=len) if fits else None


def _citations() -> list[tuple[str, int, str, str]]:
    """(file, line, page, text after §) of every citation in the tracked Python sources."""
    found = []
    for name in _tracked("*.py"):
        text = (REPO / name).read_text(encoding="utf-8")
        for m in CITATION.finditer(text):
            # A citation may run on to the next line of a comment or docstring.
            rest = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text[m.end() : m.end() + 300]).strip()
            found.append((name, text.count("\n", 0, m.start()) + 1, m.group(1), rest))
    return found


def test_every_cited_section_is_a_heading():
    citations = _citations()
    assert citations, "no docs/<page>.md § citation found in the Python sources"
    bad = []
    for name, line, page, rest in citations:
        path = DOCS / page
        if not path.is_file():
            bad.append(f"{name}:{line}: docs/{page} does not exist")
        elif _cited_section(rest, _headings(path)) is None:
            bad.append(f"{name}:{line}: docs/{page} has no heading that starts §{rest[:60]!r}")
    assert not bad, "\n".join(bad)


def test_the_slugs_and_section_matching_work():
    assert _slug("Run: `make run`") == "run-make-run"
    assert _slug("Sides and what crosses them") == "sides-and-what-crosses-them"
    headings = ("Objective", "Trajectory alignment", "Rewards")
    assert _cited_section('"Trajectory alignment" and more', headings) == "Trajectory alignment"
    assert _cited_section("Rewards [ours]: S is not paid", headings) == "Rewards"
    assert _cited_section("Rewardsish", headings) is None
    assert _cited_section("alignment", headings) is None
