"""The built-in deep-research task in one call: world, pages, questions and their splits, in memory or on disk.

`mgrpo world generate` (mgrpo_actors/cli/world.py) is the command that writes one.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from mgrpo_actors.envs.dataset import SPLITS, split_questions, write_pages, write_questions, write_world
from mgrpo_actors.envs.pages import Page, build_pages
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.envs.questions import QuestionConfig, generate_questions
from mgrpo_actors.envs.world import World, WorldConfig, generate_world

__all__ = [
    "SyntheticWeb",
    "SyntheticWebConfig",
    "build_synthetic_web",
    "config_from_args",
    "web_statistics",
    "write_synthetic_web",
]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class SyntheticWebConfig:
    """Everything that determines a synthetic web; equal configs give equal webs."""

    world: WorldConfig = field(default_factory=WorldConfig)  # entities (and the seed)
    questions: QuestionConfig = field(default_factory=QuestionConfig)  # question counts and kinds
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)  # train, validation, test


@dataclass
class SyntheticWeb:
    """A generated world with its pages and its questions split three ways."""

    config: SyntheticWebConfig
    world: World
    pages: list[Page]
    splits: dict[str, list[Question]]  # SPLITS name -> questions
    seconds: float  # time generation took

    @property
    def questions(self) -> list[Question]:
        return [q for name in SPLITS for q in self.splits[name]]


def build_synthetic_web(config: SyntheticWebConfig) -> SyntheticWeb:
    start = time.perf_counter()
    world = generate_world(config.world)
    pages = build_pages(world)
    questions = generate_questions(world, config.questions)
    splits = split_questions(questions, config.split_fractions, seed=config.world.seed)
    seconds = time.perf_counter() - start
    log.info("synthetic web built", seed=world.seed, entities=len(world.entities), questions=len(questions))
    return SyntheticWeb(config=config, world=world, pages=pages, splits=splits, seconds=seconds)


def write_synthetic_web(web: SyntheticWeb, out_dir: str | Path) -> dict[str, Path]:
    """world.jsonl, pages.jsonl, questions-{train,validation,test}.jsonl and manifest.json under out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"world": out / "world.jsonl", "pages": out / "pages.jsonl", "manifest": out / "manifest.json"}
    write_world(paths["world"], web.world)
    write_pages(paths["pages"], web.pages)
    for name in SPLITS:
        paths[name] = out / f"questions-{name}.jsonl"
        write_questions(paths[name], web.splits[name])
    manifest = {"config": asdict(web.config), "statistics": web_statistics(web)}
    paths["manifest"].write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return paths


def web_statistics(web: SyntheticWeb) -> dict[str, Any]:
    """Counts a user checks a generated web by: entities per type, questions per kind/level/split, pages."""
    by_split = {name: web.splits[name] for name in SPLITS}
    return {
        "seed": web.world.seed,
        "entities": dict(Counter(e.type for e in web.world.entities)),
        "questions_per_split": {name: len(qs) for name, qs in by_split.items()},
        "questions_per_kind": {n: dict(Counter(q.kind for q in qs)) for n, qs in by_split.items()},
        "questions_per_level": {n: dict(sorted(Counter(q.level for q in qs).items())) for n, qs in by_split.items()},
        "questions_per_stage": {n: dict(sorted(Counter(q.stage for q in qs).items())) for n, qs in by_split.items()},
        "pages": len(web.pages),
        "avg_page_chars": round(statistics.mean(len(p.text) for p in web.pages), 1),
        "max_page_chars": max(len(p.text) for p in web.pages),
        "avg_links_per_page": round(statistics.mean(len(p.links) for p in web.pages), 2),
        "seconds": round(web.seconds, 3),
    }


def config_from_args(seed: int, entities: int, questions: int, difference_share: float = 0.0) -> SyntheticWebConfig:
    """The web of `mgrpo world generate`'s flags (and of the tools config's web_* keys)."""
    return SyntheticWebConfig(
        world=WorldConfig(seed=seed, num_entities=entities),
        questions=QuestionConfig(num_questions=questions, difference_share=difference_share),
    )
