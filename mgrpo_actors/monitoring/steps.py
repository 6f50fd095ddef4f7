"""Per-step rows of a run, built only from what it publishes for people: its events (`step.started`,
`<side>.batch`, `<side>.learned`, `step.finished`, `run.finished`) and query progress (`QueryDone`),
each with its send time (the envelope's, i.e. the sender's clock). Fed live or from a replay of the
run's metrics stream alike; an event seen again (a resumed step) replaces the earlier one.

The sides are "main" and each of the run's sub-agent types (`StepLog(sub_types=…)`, config order; a side's
events are published under its name: `searcher.batch`, `searcher.learned`); events of other sides are ignored.
A row has each type's figures under `subs` (`{type: {"reward_mean", "calls", "d", …, "learner_tokens_per_s"}}`,
`_sub_figures`). The flat sub-agent keys (`sub_reward_mean`, `sub_calls`, `d`, `dk_mean`, …, `sub_loss`,
`sub_samples`, … `sub_learner_tokens_per_s`) are those of today's one default type "sub" (summary.json readers,
`mgrpo compare` and its plots read them): they hold its figures only in a run whose types are just ("sub",), and
are None in any other run (several types, or one named otherwise), so that they never show one type as if it
were the run's only sub-agent: read `subs` there.

Phases of a step, from send times: rollout = step.started → its last QueryDone; alignment → the last
of all sides' batches; learning → the last of all learners' events (weights and checkpoint included);
total = the controller's step time. Across machines they carry the clocks' skew.

Tokens per second: `main_gen_tokens_per_s` is M's generated tokens of the step (the main batch's
loss tokens) over the rollout phase; S's generated tokens are not published. `<side>_learner_tokens_per_s`
(and a type's `learner_tokens_per_s`) is a learner's loss tokens over its own compute seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from protocols import DEFAULT_SUB_TYPE, MAIN_SIDE, Event, QueryDone

__all__ = ["StepLog", "StepRecord"]

# A sub-agent type's batch figures: (key in the type's `subs` entry, the flat key of the default type "sub").
_BATCH_KEYS = (
    ("reward_mean", "sub_reward_mean"),
    ("calls", "sub_calls"),
    ("d", "d"),
    ("dk_mean", "dk_mean"),
    ("duplicates", "duplicates"),
    ("placeholders", "placeholders"),
    ("dropped", "dropped"),
    # algo.alignment.mode: none only (None otherwise): sub samples from earlier steps, and left for the next
    ("carried", "carried"),
    ("queued", "queued"),
)


@dataclass
class StepRecord:
    """What arrived for one step (figures as published) and when (send times)."""

    step: int
    started_at: float | None = None
    last_query_at: float | None = None
    queries: set[str] = field(default_factory=set)
    answered: dict[str, tuple[int, int]] = field(default_factory=dict)  # query id -> (rollouts correct, rollouts)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)  # side -> the batch event's data
    batch_at: dict[str, float] = field(default_factory=dict)
    learned: dict[str, dict[str, Any]] = field(default_factory=dict)  # side -> the learner event's data
    learned_at: dict[str, float] = field(default_factory=dict)
    seconds: float | None = None  # the controller's step time
    finished: bool = False
    sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)  # the run's sub-agent types, config order

    def row(self) -> dict[str, Any]:
        """The step as one flat row, with each sub-agent type's figures under `subs` (None where nothing was
        published; the module docstring says when the flat sub-agent keys are None)."""
        main = self.batches.get(MAIN_SIDE, {})
        subs = {sub_type: self._sub_figures(sub_type) for sub_type in self.sub_types}
        # Only today's one default type fills the flat keys; any other run's are None (read `subs`).
        flat = subs[DEFAULT_SUB_TYPE] if self.sub_types == (DEFAULT_SUB_TYPE,) else {}
        rollout_end = self.last_query_at
        aligned = max(self.batch_at.values()) if self.batch_at else None
        learned = max(self.learned_at.values()) if self.learned_at else None
        rollout_s = _span(self.started_at, rollout_end)
        row: dict[str, Any] = {
            "step": self.step,
            "main_reward_mean": _num(main.get("reward_mean")),
            "main_correct": _num(main.get("r_correct_mean")),
            "main_format_ok": _num(main.get("format_ok_rate")),
            "main_failed": _num(main.get("failed")),
            **{flat_key: flat.get(key) for key, flat_key in _BATCH_KEYS},
            "queries": len(self.queries),
            "main_tokens": _num(main.get("tokens")),
            "main_gen_tokens_per_s": _rate(main.get("tokens"), rollout_s),
            # per question: [rollouts whose answer was correct, rollouts] (a pipeline.question_pool's learning curve)
            "questions": {query: list(counts) for query, counts in sorted(self.answered.items())},
        }
        main_learner = _learner_figures(self.learned.get(MAIN_SIDE))
        row.update({f"{MAIN_SIDE}_{key}": value for key, value in main_learner.items()})
        row.update({f"{DEFAULT_SUB_TYPE}_{key}": flat.get(key) for key in main_learner})
        row.update(
            rollout_s=rollout_s,
            align_s=_span(rollout_end, aligned),
            learn_s=_span(aligned, learned),
            seconds=_num(self.seconds),
            subs=subs,
        )
        return row

    def _sub_figures(self, sub_type: str) -> dict[str, float | None]:
        """One sub-agent type's figures of the step: its aligner's batch and its learner's."""
        batch = self.batches.get(sub_type, {})
        return {key: _num(batch.get(key)) for key, _ in _BATCH_KEYS} | _learner_figures(self.learned.get(sub_type))


def _learner_figures(learned: dict[str, Any] | None) -> dict[str, float | None]:
    """A learner's figures of a step, from its `<side>.learned` event (None: not published)."""
    figures = learned or {}
    return {
        "loss": _num(figures.get("loss")),
        "samples": _num(figures.get("samples")),  # samples its learner trained on (A != 0 or KL)
        "staleness_max": _num(figures.get("staleness_max")),
        "clip_fraction": _num(figures.get("clip_fraction")),
        "version": _num(figures.get("version")),
        "learner_s": _num(figures.get("seconds")),
        "learner_tokens_per_s": _rate(figures.get("tokens"), figures.get("seconds")),
    }


class StepLog:
    """The run's steps so far, for its sub-agent types (config order; () for a run without a sub side, e.g.
    single-agent); `add_event` / `add_query_done` return the step they touched (or None)."""

    def __init__(self, sub_types: Sequence[str] = (DEFAULT_SUB_TYPE,)) -> None:
        self.sub_types = tuple(sub_types)
        self.sides = (MAIN_SIDE, *self.sub_types)
        self.steps: dict[int, StepRecord] = {}
        self.first_at: float | None = None  # the first step.started
        self.finished_at: float | None = None  # run.finished
        self.finished_steps: int | None = None

    def _record(self, step: Any) -> StepRecord | None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            return None
        return self.steps.setdefault(step, StepRecord(step, sub_types=self.sub_types))

    def add_event(self, event: Event, sent_at: float) -> StepRecord | None:
        data = event.data
        if event.kind == "run.finished":
            self.finished_at = sent_at
            self.finished_steps = data.get("steps") if isinstance(data.get("steps"), int) else None
            return None
        record = self._record(data.get("step"))
        if record is None:
            return None
        side, _, what = event.kind.partition(".")
        if event.kind == "step.started":
            if record.started_at is not None:  # the step again (resumed): its rollouts start over
                record.last_query_at, record.queries, record.answered = None, set(), {}
            record.started_at = sent_at
            self.first_at = sent_at if self.first_at is None else min(self.first_at, sent_at)
        elif event.kind == "step.finished":
            record.seconds, record.finished = _num(data.get("seconds")), True
        elif side in self.sides and what == "batch":
            record.batches[side], record.batch_at[side] = dict(data), sent_at
        elif side in self.sides and what == "learned":
            record.learned[side], record.learned_at[side] = dict(data), sent_at
        else:
            return None
        return record

    def add_query_done(self, done: QueryDone, sent_at: float) -> StepRecord | None:
        record = self._record(done.step)
        if record is not None:
            record.queries.add(done.query_id)
            record.answered[done.query_id] = (done.correct_rollouts, done.num_rollouts)  # a redelivered query: its last
            record.last_query_at = sent_at if record.last_query_at is None else max(record.last_query_at, sent_at)
        return record

    def rows(self) -> list[dict[str, Any]]:
        return [self.steps[step].row() for step in sorted(self.steps)]

    @property
    def run_seconds(self) -> float | None:
        """First step.started → run.finished (send times), once the run is finished."""
        return _span(self.first_at, self.finished_at)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(0.0, end - start)


def _rate(amount: Any, seconds: Any) -> float | None:
    amount, seconds = _num(amount), _num(seconds)
    return None if amount is None or not seconds else amount / seconds
