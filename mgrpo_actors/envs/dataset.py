"""JSONL files of a world, its pages and its questions; question loading; train/validation/test splits.

Any JSONL file of questions loads (`load_questions`, the one loader of training's `pipeline.dataset` and of
`mgrpo eval --file`): in the built-in format (`{id, question, answer, aliases?}`, plus the synthetic web's
kind, level and evidence), or under the file's own field names given as `QuestionFields`, so a real
benchmark (GAIA, WebWalkerQA, XBench-DeepSearch) or your own data plugs in as it is. Errors name file and line.
"""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mgrpo_actors.envs.pages import Page
from mgrpo_actors.envs.qa import Question, QuestionFields, question_from_dict, question_from_record, question_to_dict
from mgrpo_actors.envs.world import Entity, World

__all__ = [
    "SPLITS",
    "DatasetError",
    "entity_record",
    "load_pages",
    "load_questions",
    "read_jsonl",
    "resolve_pages",
    "split_questions",
    "write_jsonl",
    "write_pages",
    "write_questions",
    "write_world",
]

SPLITS = ("train", "validation", "test")
PathLike = str | os.PathLike[str]


class DatasetError(ValueError):
    """A dataset file is missing, not JSONL, or holds a record of the wrong shape."""


def write_jsonl(path: PathLike, records: Iterable[dict[str, Any]]) -> int:
    """Write one JSON object per line; returns how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def read_jsonl(path: PathLike) -> Iterator[tuple[int, Any]]:
    """(line number, decoded JSON) for every non-blank line."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot open {path}: {exc.strerror}") from exc
    with f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield line_no, json.loads(line)
            except ValueError as exc:
                raise DatasetError(f"{path}:{line_no}: not valid JSON ({exc})") from exc


def _decoded(raw: bytes, path: str, line_no: int) -> str:
    try:
        # A byte-order mark may open the file (some tools write one); it is not part of the JSON.
        return raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(
            f"{path}:{line_no}: not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
        ) from None


def _question(record: Any, fields: QuestionFields | None, line_no: int) -> Question:
    if fields is None:
        return question_from_dict(record)
    return question_from_record(record, fields, line_no)


def load_questions(path: PathLike, fields: QuestionFields | None = None) -> list[Question]:
    """Every question of the JSONL file `path`, in file order; ids unique. `fields` None: the built-in format,
    every field under its own name (id required); else the file's own field names, only those read (a record
    without an id field gets "line-N"). DatasetError naming the file and line of anything wrong. The file is read
    as bytes and decoded line by line, so a bad byte's line is known; nothing is dropped silently."""
    name = os.fspath(path)
    try:
        f = open(name, "rb")
    except OSError as exc:
        raise DatasetError(f"cannot open {name}: {exc.strerror}") from None
    questions: list[Question] = []
    first_line: dict[str, int] = {}
    with f:
        for line_no, raw in enumerate(f, start=1):
            text = _decoded(raw, name, line_no)
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except ValueError as exc:
                raise DatasetError(f"{name}:{line_no}: not valid JSON ({exc})") from None
            try:
                question = _question(record, fields, line_no)
            except ValueError as exc:  # a QuestionFormatError in the built-in format (kept as the cause)
                raise DatasetError(f"{name}:{line_no}: {exc}") from exc
            if question.id in first_line:
                raise DatasetError(
                    f"{name}:{line_no}: question id {question.id!r} already on line {first_line[question.id]}"
                )
            first_line[question.id] = line_no
            questions.append(question)
    if not questions:
        raise DatasetError(f"{name}: no questions (the file is empty)")
    return questions


def write_questions(path: PathLike, questions: Iterable[Question]) -> int:
    return write_jsonl(path, (question_to_dict(q) for q in questions))


def entity_record(entity: Entity) -> dict[str, Any]:
    return {**asdict(entity), "aliases": list(entity.aliases), "url": entity.url}


def write_world(path: PathLike, world: World) -> int:
    """world.jsonl: a header line with the seed, then one entity per line."""
    return write_jsonl(path, [{"seed": world.seed}, *(entity_record(e) for e in world.entities)])


def write_pages(path: PathLike, pages: Iterable[Page]) -> int:
    return write_jsonl(path, ({**asdict(p), "links": list(p.links)} for p in pages))


def load_pages(path: PathLike) -> list[Page]:
    pages = []
    for line_no, r in read_jsonl(path):
        try:
            pages.append(Page(url=r["url"], title=r["title"], text=r["text"], links=tuple(r["links"])))
        except (KeyError, TypeError) as exc:
            raise DatasetError(f"{path}:{line_no}: not a page record ({exc!r})") from exc
    return pages


def resolve_pages(pages: Sequence[Page] | PathLike) -> list[Page]:
    """Pages given directly, or the path of a pages.jsonl (how tools built from config get them)."""
    if isinstance(pages, (str, os.PathLike)):
        return load_pages(Path(pages))
    return list(pages)


def split_questions(
    questions: Sequence[Question], fractions: tuple[float, float, float] = (0.8, 0.1, 0.1), seed: int = 0
) -> dict[str, list[Question]]:
    """Disjoint train/validation/test splits, stratified by (kind, level) so each split has every kind."""
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"split fractions must be three non-negative numbers summing to 1, got {fractions}")
    groups: dict[tuple[str, int], list[Question]] = defaultdict(list)
    for q in questions:
        groups[(q.kind, q.level)].append(q)
    rng = random.Random(f"{seed}-split")
    splits: dict[str, list[Question]] = {name: [] for name in SPLITS}
    for key in sorted(groups):
        group = list(groups[key])
        rng.shuffle(group)
        n_train = round(len(group) * fractions[0])
        n_val = round(len(group) * (fractions[0] + fractions[1])) - n_train
        splits["train"] += group[:n_train]
        splits["validation"] += group[n_train : n_train + n_val]
        splits["test"] += group[n_train + n_val :]
    for name in SPLITS:
        splits[name].sort(key=lambda q: q.id)
    return splits
