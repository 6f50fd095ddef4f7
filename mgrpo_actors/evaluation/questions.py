"""Questions for `mgrpo eval` from any JSONL file of questions and answers, read under the file's own
field names (GAIA's `Question` / `Final answer`, say), so benchmark dumps load as they are.

Each non-blank line holds one question. Fields other than the configured ones are kept in
`Question.extra` and otherwise ignored. A line that is not UTF-8, not JSON or not an object, or whose
question or answer is missing or empty, is an error naming the file and the line: nothing is dropped
silently. The file is read as bytes and decoded line by line, so a bad byte's line is known.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from mgrpo_actors.envs.dataset import DatasetError
from mgrpo_actors.envs.qa import Question

__all__ = ["EvalDataError", "QuestionFields", "load_eval_questions", "question_from_record"]


class EvalDataError(DatasetError):
    """A questions file cannot be read, or one of its lines is not a usable question (names the line)."""


@dataclass(frozen=True)
class QuestionFields:
    """Which field of a JSONL record holds what."""

    question: str = "question"  # the question text (a non-empty string)
    answer: str = "answer"  # the gold answer: a non-empty string, or a number (turned into its string)
    id: str = "id"  # the question's id (string or integer); a record without it gets "line-N", N its line
    aliases: str | None = "aliases"  # other accepted answers: a list or one string; None: no aliases


def _text(value: Any, field: str, numbers: bool) -> str:
    """`value` as a non-empty string; numbers are accepted (and converted) only where `numbers` says."""
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"field {field!r} is {value}, not an answer")
        value = str(value)  # numeric gold answers, e.g. GAIA's
    if not isinstance(value, str):
        kind = "a string or a number" if numbers else "a string"
        raise ValueError(f"field {field!r} must be {kind}, got {type(value).__name__}: {value!r}")
    if not value.strip():
        raise ValueError(f"field {field!r} is empty")
    return value


def _required(record: dict[str, Any], field: str, numbers: bool) -> str:
    if record.get(field) is None:
        raise ValueError(f"no field {field!r} (the line has {', '.join(map(repr, record)) or 'no fields'})")
    return _text(record[field], field, numbers)


def _aliases(record: dict[str, Any], field: str | None) -> tuple[str, ...]:
    """The aliases as strings; blank ones are left out (an empty alias would accept an empty answer)."""
    value = None if field is None else record.get(field)
    if value is None:
        return ()
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list):
        raise ValueError(f"field {field!r} must be a list of strings or one string, got {type(value).__name__}")
    texts = []
    for index, item in enumerate(values):
        if isinstance(item, str) and not item.strip():
            continue
        texts.append(_text(item, f"{field}[{index}]", numbers=True))
    return tuple(texts)


def _question_id(record: dict[str, Any], field: str, line_no: int) -> str:
    """The record's id: a string, or an integer (benchmarks often number their questions) as a string;
    "line-N" for a record without one."""
    value = record.get(field)
    if value is None:
        return f"line-{line_no}"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"field {field!r} must be a string or an integer, got {type(value).__name__}: {value!r}")
    return _text(value, field, numbers=False)


def question_from_record(record: Any, fields: QuestionFields, line_no: int) -> Question:
    """One question from one decoded line; ValueError saying what is wrong with it."""
    if not isinstance(record, dict):
        raise ValueError(f"a question must be a JSON object, got {type(record).__name__}")
    used = {fields.question, fields.answer, fields.id, fields.aliases}
    return Question(
        id=_question_id(record, fields.id, line_no),
        question=_required(record, fields.question, numbers=False),
        answer=_required(record, fields.answer, numbers=True),
        aliases=_aliases(record, fields.aliases),
        extra={key: value for key, value in record.items() if key not in used},
    )


def _decoded(raw: bytes, path: str, line_no: int) -> str:
    try:
        # A byte-order mark may open the file (some tools write one); it is not part of the JSON.
        return raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise EvalDataError(
            f"{path}:{line_no}: not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
        ) from None


def load_eval_questions(path: str | os.PathLike[str], fields: QuestionFields = QuestionFields()) -> list[Question]:
    """Every question of the JSONL file `path`, in file order; EvalDataError naming the line otherwise."""
    name = os.fspath(path)
    try:
        f = open(name, "rb")
    except OSError as exc:
        raise EvalDataError(f"cannot open {name}: {exc.strerror}") from None
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
                raise EvalDataError(f"{name}:{line_no}: not valid JSON ({exc})") from None
            try:
                question = question_from_record(record, fields, line_no)
            except ValueError as exc:
                raise EvalDataError(f"{name}:{line_no}: {exc}") from None
            if question.id in first_line:
                raise EvalDataError(
                    f"{name}:{line_no}: question id {question.id!r} already on line {first_line[question.id]}"
                )
            first_line[question.id] = line_no
            questions.append(question)
    if not questions:
        raise EvalDataError(f"{name}: no questions (the file is empty)")
    return questions
