"""The question record every dataset loads into: synthetic multi-hop questions and real benchmarks alike.

A real benchmark (GAIA, WebWalkerQA, XBench-DeepSearch) needs only `{id, question, answer}` and
optionally `aliases`; the synthetic generator also fills in kind, difficulty and the evidence chains
(which pages hold which fact), which a rule-based r_expert can check a sub-agent's result against.

Two record formats: the built-in one (`question_from_dict`: every field under its own name, as
`mgrpo world generate` writes it) and any JSONL under its own field names (`question_from_record` with a
`QuestionFields` mapping: `pipeline.dataset_fields` for training, `mgrpo eval --question-field …`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Evidence",
    "Question",
    "QuestionFields",
    "QuestionFormatError",
    "question_from_dict",
    "question_from_record",
    "question_to_dict",
]


class QuestionFormatError(ValueError):
    """A question record lacks a required field or has one of the wrong type."""


@dataclass(frozen=True)
class Evidence:
    """One chain of pages that establishes one fact the answer depends on."""

    subject: str  # name of the entity the fact is about (the last entity whose page is read)
    fact: str  # the value as the last page writes it
    urls: tuple[str, ...]  # pages to read in order; each links to the next, the last states `fact`
    entities: tuple[str, ...]  # names of the entities along the chain, the answer entity last if any


@dataclass(frozen=True)
class Question:
    """One question with its gold answer; only id, question and answer are required."""

    id: str  # unique within a dataset; splits never share one
    question: str  # the text the main agent receives
    answer: str  # the gold answer
    aliases: tuple[str, ...] = ()  # other strings a grader accepts as the answer
    kind: str = "external"  # lookup | chain | compare | compose | aggregate, or external
    level: int = 0  # difficulty: facts to find (sum of hops over evidence chains); 0 = unknown
    stage: int = 0  # curriculum stage: 1 (single fact) or 2 (multi-hop); 0 = unknown
    hops: int = 0  # longest evidence chain, in facts followed
    operation: str = ""  # how the answer follows from the evidence facts (see questions.combine_facts)
    operand: str = ""  # the operation's constant, e.g. the city to count or the year to compare with
    evidence: tuple[Evidence, ...] = ()  # chains of pages behind the answer
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # unknown fields, kept

    @property
    def answers(self) -> list[str]:
        """Gold answer first, then aliases (the order RolloutRequest.answers uses)."""
        return [self.answer, *self.aliases]

    @property
    def evidence_entities(self) -> list[str]:
        """Every entity name on any evidence chain, in order, without repeats."""
        return list(dict.fromkeys(name for chain in self.evidence for name in chain.entities))


_KNOWN = ("id", "question", "answer", "aliases", "kind", "level", "stage", "hops", "operation", "operand")


def question_to_dict(question: Question) -> dict[str, Any]:
    record: dict[str, Any] = {k: getattr(question, k) for k in _KNOWN}
    record["aliases"] = list(question.aliases)
    record["evidence"] = [
        {"subject": e.subject, "fact": e.fact, "urls": list(e.urls), "entities": list(e.entities)}
        for e in question.evidence
    ]
    return {**question.extra, **record}


_REQUIRED = object()


def _require(record: dict[str, Any], key: str, type_: type, default: Any = _REQUIRED) -> Any:
    """record[key] checked against type_; a missing or null optional field gives `default`."""
    value = record.get(key)
    if value is None and default is not _REQUIRED:
        return default
    if isinstance(value, bool) or not isinstance(value, type_):
        optional = "" if default is _REQUIRED else " (optional)"
        got = f"{type(value).__name__}: {value!r}"
        raise QuestionFormatError(f"field {key!r} must be {type_.__name__}{optional}, got {got}")
    return value


def _evidence(record: Any) -> Evidence:
    if not isinstance(record, dict):
        raise QuestionFormatError(f"evidence entries must be objects, got {type(record).__name__}")
    urls, entities = _require(record, "urls", list), _require(record, "entities", list)
    return Evidence(
        subject=_require(record, "subject", str),
        fact=_require(record, "fact", str),
        urls=tuple(str(u) for u in urls),
        entities=tuple(str(e) for e in entities),
    )


def question_from_dict(record: Any) -> Question:
    """Build a Question from one JSON object; raises QuestionFormatError naming the bad field."""
    if not isinstance(record, dict):
        raise QuestionFormatError(f"a question must be a JSON object, got {type(record).__name__}")
    aliases = _require(record, "aliases", list, default=[])
    if not all(isinstance(a, str) for a in aliases):
        raise QuestionFormatError(f"field 'aliases' must be a list of strings, got {aliases!r}")
    qid = record.get("id")
    if isinstance(qid, int) and not isinstance(qid, bool):
        qid = str(qid)  # benchmarks often number their questions
    answer = record.get("answer")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)  # numeric gold answers, e.g. GAIA's
    for key, value in (("id", qid), ("question", record.get("question")), ("answer", answer)):
        if isinstance(value, str) and not value.strip():
            raise QuestionFormatError(f"field {key!r} must not be empty")
    return Question(
        id=_require({"id": qid}, "id", str),
        question=_require(record, "question", str),
        answer=_require({"answer": answer}, "answer", str),
        aliases=tuple(aliases),
        kind=_require(record, "kind", str, default="external"),
        level=_require(record, "level", int, default=0),
        stage=_require(record, "stage", int, default=0),
        hops=_require(record, "hops", int, default=0),
        operation=_require(record, "operation", str, default=""),
        operand=_require(record, "operand", str, default=""),
        evidence=tuple(_evidence(e) for e in _require(record, "evidence", list, default=[])),
        extra={k: v for k, v in record.items() if k not in (*_KNOWN, "evidence")},
    )


@dataclass(frozen=True)
class QuestionFields:
    """Which field of a JSONL record holds what, for a file under its own field names (GAIA's `Question` / `Final
    answer`, say); every other field of a record is kept in `Question.extra` and otherwise ignored."""

    question: str = "question"
    """field of the question text (a non-empty string)"""
    answer: str = "answer"
    """field of the gold answer: a non-empty string, or a number (turned into its string)"""
    id: str = "id"
    """field of the question's id (a string or an integer); a record without it gets "line-N", N its line"""
    aliases: str | None = "aliases"
    """field of other accepted answers: a list of strings or one string; None: no aliases"""

    def __post_init__(self) -> None:
        for name in ("question", "answer", "id", "aliases"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value.strip()):
                raise ValueError(f"the {name} field's name must be a non-empty string, got {value!r}")


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
    """One question from one decoded line read under `fields` (only those count: a field the built-in format
    names, such as `level`, is kept in `extra`, not read); ValueError saying what is wrong with it."""
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
