"""`mgrpo world generate --seed N --out DIR [--entities N] [--questions N]`: write a synthetic web, print statistics.

Writes world.jsonl, pages.jsonl, questions-{train,validation,test}.jsonl and manifest.json. Also runs
on its own: `python -m mgrpo_actors.cli.world generate --seed 0 --out data/web`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from mgrpo_actors.envs.dataset import SPLITS
from mgrpo_actors.envs.questions import QUESTION_KINDS, QuestionConfig, max_difference_share
from mgrpo_actors.envs.synthetic_web import build_synthetic_web, config_from_args, web_statistics, write_synthetic_web
from mgrpo_actors.envs.world import ENTITY_TYPES, WorldConfig

__all__ = ["main", "print_statistics", "run_generate"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the `world` command (with its `generate` subcommand) to an argparse subparsers object."""
    world = subparsers.add_parser("world", help="synthetic deep-research web: generate worlds and questions")
    commands = world.add_subparsers(dest="world_command", required=True)
    generate = commands.add_parser("generate", help="write a world, its pages and its questions as JSONL")
    generate.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    generate.add_argument("--out", required=True, help="output directory")
    generate.add_argument("--entities", type=int, default=WorldConfig.num_entities, help="number of entities")
    generate.add_argument("--questions", type=int, default=QuestionConfig.num_questions, help="number of questions")
    generate.add_argument(
        "--difference-share",
        type=float,
        default=0.0,
        help=f"share of difference questions (two lookups, a subtraction; 0 to {max_difference_share():g}, default 0)",
    )
    generate.set_defaults(func=run_generate)
    return world


def _split_table(title: str, rows: list[str], per_split: dict[str, dict[Any, int]]) -> Table:
    table = Table(title=title)
    table.add_column(title.split(" per ")[-1])
    for name in SPLITS:
        table.add_column(name, justify="right")
    table.add_column("total", justify="right")
    for row in rows:
        counts = [per_split[name].get(row, 0) for name in SPLITS]
        table.add_row(str(row), *map(str, counts), str(sum(counts)))
    return table


def print_statistics(stats: dict[str, Any], out: str, console: Console) -> None:
    entities = Table(title="entities per type")
    entities.add_column("type")
    entities.add_column("count", justify="right")
    for type_ in ENTITY_TYPES:
        entities.add_row(type_, str(stats["entities"].get(type_, 0)))
    console.print(entities)
    console.print(_split_table("questions per kind", list(QUESTION_KINDS), stats["questions_per_kind"]))
    levels = sorted({level for counts in stats["questions_per_level"].values() for level in counts})
    console.print(_split_table("questions per level", levels, stats["questions_per_level"]))
    stages = {stage: sum(c.get(stage, 0) for c in stats["questions_per_stage"].values()) for stage in (1, 2)}
    console.print(f"curriculum: stage 1 (single fact) {stages[1]} questions, stage 2 (multi-hop) {stages[2]}")
    console.print(
        f"pages: {stats['pages']}, avg {stats['avg_page_chars']} chars (max {stats['max_page_chars']}), "
        f"avg {stats['avg_links_per_page']} links per page"
    )
    console.print(f"seed {stats['seed']}: generated in {stats['seconds']:.3f} s, written to {out}")


def run_generate(args: argparse.Namespace) -> int:
    if args.entities < 60 or args.questions < 1:
        raise SystemExit(f"need --entities >= 60 and --questions >= 1, got {args.entities} and {args.questions}")
    if not 0.0 <= args.difference_share <= max_difference_share():
        raise SystemExit(f"need --difference-share within [0, {max_difference_share():g}], got {args.difference_share}")
    web = build_synthetic_web(config_from_args(args.seed, args.entities, args.questions, args.difference_share))
    write_synthetic_web(web, args.out)
    print_statistics(web_statistics(web), args.out, Console())
    return 0


def main(argv: list[str] | None = None) -> int:
    """`mgrpo world ...` on its own; argv excludes the leading "world"."""
    parser = argparse.ArgumentParser(prog="mgrpo")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["world", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
