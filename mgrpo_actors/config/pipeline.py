"""The `pipeline` section of the node config: what the controller rolls out per step, and the
timeouts, retries and batching of the actor pipeline (docs/architecture.md §One training step)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from mgrpo_actors.config.paths import not_a_regular_file
from mgrpo_actors.envs.qa import QuestionFields
from mgrpo_actors.envs.questions import QUESTION_KINDS

__all__ = ["PipelineConfig", "timeout_warnings"]


@dataclass(frozen=True)
class PipelineConfig:
    """Steps, batch shape, dataset and delivery settings of the controller, agents and aligners."""

    steps: int = 2
    """training steps the controller runs; then it reports the run finished"""
    queries_per_step: int = 2
    """B: queries rolled out per step"""
    rollouts_per_query: int = 2
    """K: rollouts per query, at least 2: M's advantages compare them (paper: 8)"""
    dataset: str = "synthetic"
    """"synthetic": the built-in web's questions (tools.web_seed/web_entities); else the path of a JSONL of
    {id, question, answer, aliases?}"""
    dataset_fields: QuestionFields | None = None
    """the field names of a JSONL `dataset` that names its own fields, e.g. {question: prompt, answer: target} (read
    only those, as `mgrpo eval --file` reads a file with its --question-field/--answer-field/--id-field/--aliases-field
    flags; a record without the id field gets "line-N"); None = the built-in format, every field under its own name
    (id, question, answer, aliases, and the synthetic web's kind, level and evidence)"""
    split: Literal["train", "validation", "test"] = "train"
    """split of the built-in web's questions used for training"""
    levels: list[int] | None = None
    """only questions of these levels (1 = lookups, stage 1); None = all (stage 2 of a curriculum)"""
    kinds: list[str] | None = None
    """only questions of these kinds (the built-in web's lookup, chain, compare, compose, aggregate, difference;
    envs/questions.py), in training and in `mgrpo eval`; None = every kind"""
    stage1_steps: int = 0
    """curriculum (docs/method.md §Training schedule): the first N steps draw only `stage1_levels` questions; 0 = no
    stage 1"""
    stage1_levels: list[int] = field(default_factory=lambda: [1])
    """stage 1's levels (1 = one-fact lookups: learn the format)"""
    question_pool: int = 0
    """0 = every question the split and levels select; N = a fixed pool of N of them per stage (drawn with run.seed),
    walked again every N/B steps: a short run then meets its questions again, so its training reward compares step
    to step; it measures learning on those questions, not on unseen ones (`mgrpo eval` does that)"""
    pool_probe_rollouts: int = 0
    """0 = off; N: before RL, `mgrpo run` rolls out each of pool_probe_candidates questions N times with the
    starting models and makes the question_pool of those they answered sometimes but not always, nearest to half
    first (a group whose rollouts all agree has no advantage to learn from: zero-variance filtering, as DAPO's
    dynamic sampling does per batch [ours]); said, and cached beside the warm start"""
    pool_probe_candidates: int = 0
    """questions the probe tries, drawn with run.seed as a question_pool is; 0 = 3 × question_pool"""
    question_ids: list[str] | None = None
    """an explicit question pool: these questions of the training split (at the run's levels), in this order,
    instead of a drawn one; what the pool probe sets; None = drawn (question_pool)"""
    mode: Literal["sync", "async"] = "sync"
    """sync: step n+1 rolls out with step n's weights; async: rollouts run up to max_staleness steps ahead of the
    learners"""
    max_staleness: int = 1
    """policy versions a sample may lag its learner: async mode runs this many steps ahead; no step starts while a
    training side's learner is more versions behind it (what bounds `advance_on: batches`); learners drop (and
    count) samples staler still and renormalise their groups over the survivors"""
    shuffle: bool = True
    """visit the questions in a seeded random order (run.seed), a new order each epoch"""
    advance_on: Literal["learners", "batches"] = "learners"
    """next step once the learners applied the step (a frozen side: once its batch is out), or once both batches are
    out while the learners are at most max_staleness versions behind (rollouts overlap learning)"""
    rollout_timeout_s: float = 3600.0
    """aligners give up on a rollout missing this long after its step plan arrived (counted as failed)"""
    subtask_timeout_s: float = 300.0
    """M waits this long for one sub-agent result before retrying elsewhere"""
    tool_timeout_s: float = 10.0
    """agents wait this long for one tool result before retrying elsewhere"""
    call_retries: int = 2
    """extra attempts of a timed-out or unanswered subtask/tool call (another instance answers)"""
    main_queries_in_flight: int = 4
    """rollout requests one main-agent actor takes at once (their K rollouts generate batched)"""
    sub_batch: int = 32
    """subtasks one sub-agent actor runs batched on its engine at once: a step's subtasks in one batch where they
    fit (16 split mgrpo bench steps' 32 into two batches one after the other: 0.16-0.21 s of other work a step against
    0.14-0.15 with 32, on 2 cores; a fuller batch costs little more per decode step). Keys and values grow with
    rows x context: SmolLM2 in fp32 at 4,096 tokens takes about 2.8 GiB at 16 rows, 5.6 GiB at 32"""
    batch_gather_s: float = 0.01
    """an idle agent waits this long after a request for the rest of its burst (a step's queries, a rollout's
    subtasks), so they generate batched"""
    ack_wait_s: float = 60.0
    """JetStream ack wait: a dead process's work is redelivered after it (live ones send progress acks)"""
    tick_s: float = 1.0
    """how often the aligners check their steps' timeouts and retry failed publishes, and the controller its watchdog"""
    stall_timeout_s: float = 1800.0
    """the controller's watchdog: a run where nothing moves this long (no step started, query done, batch out or
    learner step) is reported stalled, naming what it waits for, and stopped with exit 3; 0 = off. While a batch of the
    step is not out yet it waits rollout_timeout_s longer (the aligners' own timeout acts first). 1800 s: 10× a whole
    healthy SmolLM2 step on 2 CPU cores (up to ~3 min)"""

    def __post_init__(self) -> None:
        for name in ("steps", "queries_per_step", "main_queries_in_flight", "sub_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"pipeline.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.batch_gather_s <= 10:
            raise ValueError(f"pipeline.batch_gather_s must be within [0, 10], got {self.batch_gather_s}")
        if self.call_retries < 0:
            raise ValueError(f"pipeline.call_retries must be >= 0, got {self.call_retries}")
        if self.question_pool and self.question_pool < self.queries_per_step:
            raise ValueError(
                f"pipeline.question_pool {self.question_pool} cannot fill a step of queries_per_step "
                f"{self.queries_per_step}: use 0 (every question) or at least {self.queries_per_step}"
            )
        for name in ("rollout_timeout_s", "subtask_timeout_s", "tool_timeout_s", "ack_wait_s", "tick_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"pipeline.{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.stall_timeout_s < math.inf:  # NaN fails too
            raise ValueError(f"pipeline.stall_timeout_s must be >= 0 and finite (0 = off), got {self.stall_timeout_s}")
        if self.rollouts_per_query < 2:
            raise ValueError(
                f"pipeline.rollouts_per_query must be >= 2 (M's group advantages compare the K rollouts of a query), "
                f"got {self.rollouts_per_query}"
            )
        problem = None if self.dataset == "synthetic" else not_a_regular_file(self.dataset)
        if problem is not None:
            raise ValueError(f"pipeline.dataset {self.dataset!r} is neither 'synthetic' nor a JSONL file: it {problem}")
        if self.dataset_fields is not None and self.dataset == "synthetic":
            raise ValueError("pipeline.dataset_fields names the fields of a JSONL pipeline.dataset, not of 'synthetic'")
        if self.levels is not None and not self.levels:
            raise ValueError("pipeline.levels must name at least one level, or be null for all")
        unknown = None if self.kinds is None else sorted(set(self.kinds) - set(QUESTION_KINDS))
        if self.kinds is not None and (not self.kinds or unknown):
            raise ValueError(
                f"pipeline.kinds must name some of {', '.join(QUESTION_KINDS)}, or be null for all; got {self.kinds}"
            )
        if self.stage1_steps < 0 or self.max_staleness < 0:
            raise ValueError(
                f"pipeline.stage1_steps and pipeline.max_staleness must be >= 0, "
                f"got {self.stage1_steps} and {self.max_staleness}"
            )
        if self.stage1_steps and not self.stage1_levels:
            raise ValueError("pipeline.stage1_levels must name at least one level when pipeline.stage1_steps > 0")
        self._check_pool_choice()

    @property
    def one_stage(self) -> int | None:
        """The stage every step of the run draws from (1 or 2), or None for a curriculum of both."""
        if not self.stage1_steps:
            return 2
        return 1 if self.stage1_steps >= self.steps else None

    def _check_pool_choice(self) -> None:
        if self.pool_probe_rollouts < 0 or self.pool_probe_candidates < 0:
            raise ValueError(
                "pipeline.pool_probe_rollouts and pipeline.pool_probe_candidates must be >= 0, "
                f"got {self.pool_probe_rollouts} and {self.pool_probe_candidates}"
            )
        if self.pool_probe_rollouts == 1:
            raise ValueError("pipeline.pool_probe_rollouts must be 0 (off) or >= 2: one rollout cannot disagree")
        if self.pool_probe_rollouts and not self.question_pool:
            raise ValueError("pipeline.pool_probe_rollouts chooses a question_pool: set pipeline.question_pool > 0")
        if self.pool_probe_candidates and self.pool_probe_candidates < self.question_pool:
            raise ValueError(
                f"pipeline.pool_probe_candidates {self.pool_probe_candidates} cannot fill a question_pool of "
                f"{self.question_pool}"
            )
        if self.question_ids is not None:
            if len(self.question_ids) < self.queries_per_step or len(set(self.question_ids)) != len(self.question_ids):
                raise ValueError(
                    f"pipeline.question_ids must name at least queries_per_step ({self.queries_per_step}) questions, "
                    f"each once; got {self.question_ids}"
                )
        if (self.pool_probe_rollouts or self.question_ids is not None) and self.one_stage is None:
            raise ValueError(
                "pipeline.question_ids and pipeline.pool_probe_rollouts choose the pool of a run in one stage: "
                "set pipeline.stage1_steps to 0 or to at least pipeline.steps"
            )

    @property
    def probe_candidates(self) -> int:
        """How many questions the pool probe tries (pool_probe_candidates, or 3 × question_pool)."""
        return self.pool_probe_candidates or 3 * self.question_pool

    @property
    def steps_ahead(self) -> int:
        """Steps the controller may publish beyond the oldest unfinished one (0 in sync mode)."""
        return self.max_staleness if self.mode == "async" else 0


def longest_attempt_s(timeout_s: float) -> float:
    """The longest one attempt of a call may take (runtime/retry.py): while nobody listens it is resent
    for up to min(timeout, NO_RESPONDERS_PATIENCE_S), and the last send may then wait its whole timeout."""
    from mgrpo_actors.runtime.retry import NO_RESPONDERS_PATIENCE_S

    return timeout_s + min(timeout_s, NO_RESPONDERS_PATIENCE_S)


def timeout_warnings(pipeline: PipelineConfig, main_turns: int, sub_turns: int) -> list[str]:
    """Timeouts that allow a rollout longer than the aligners wait for it (worst case: every call of
    every turn takes its longest attempt, every attempt). Warnings, not errors: the worst case is rare."""
    attempts = pipeline.call_retries + 1
    warnings = []
    longest_subtask = sub_turns * longest_attempt_s(pipeline.tool_timeout_s) * attempts
    if longest_subtask > pipeline.subtask_timeout_s:
        warnings.append(
            f"pipeline.subtask_timeout_s ({pipeline.subtask_timeout_s:g}) is below agents.sub.max_turns (the longest "
            "sub-agent type's) × (pipeline.tool_timeout_s + up to 5 s of resends while no tool listens) × "
            "(call_retries + 1) = "
            f"{longest_subtask:g}: slow tools can make M give up on S"
        )
    longest_rollout = main_turns * longest_attempt_s(pipeline.subtask_timeout_s) * attempts
    if longest_rollout > pipeline.rollout_timeout_s:
        warnings.append(
            f"pipeline.rollout_timeout_s ({pipeline.rollout_timeout_s:g}) is below agents.main.max_turns × "
            "(pipeline.subtask_timeout_s + up to 5 s of resends while no sub-agent listens) × (call_retries + 1) = "
            f"{longest_rollout:g}: slow sub-agents can time whole steps out"
        )
    return warnings
