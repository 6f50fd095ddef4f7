"""The `pipeline` section of the node config: what the controller rolls out per step, and the
timeouts, retries and batching of the actor pipeline (design.md §One training step)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["PipelineConfig"]


@dataclass(frozen=True)
class PipelineConfig:
    """Steps, batch shape, dataset and delivery settings of the controller, agents and aligners."""

    steps: int = 2  # training steps the controller runs; then it reports the run finished
    queries_per_step: int = 2  # B: queries rolled out per step
    rollouts_per_query: int = 2  # K: rollouts per query (paper: 8)
    dataset: str = "synthetic"  # "synthetic": the built-in web's questions (tools.web_seed/web_entities); else a JSONL path
    split: Literal["train", "validation", "test"] = "train"  # split of the built-in web's questions used for training
    levels: list[int] | None = None  # only questions of these levels (1 = lookups, stage 1); None = all
    shuffle: bool = True  # visit the questions in a seeded random order (run.seed), a new order each epoch
    advance_on: Literal["batches", "learners"] = "batches"  # next step once both aligners published (batches) or both learners applied (learners)
    rollout_timeout_s: float = 600.0  # aligners give up on a rollout missing this long after its step started (counted as failed)
    subtask_timeout_s: float = 300.0  # M waits this long for one sub-agent result before retrying elsewhere
    tool_timeout_s: float = 30.0  # agents wait this long for one tool result before retrying elsewhere
    call_retries: int = 2  # extra attempts of a timed-out or unanswered subtask/tool call (another instance answers)
    main_queries_in_flight: int = 4  # rollout requests one main-agent actor takes at once (their K rollouts generate batched)
    sub_batch: int = 16  # subtasks one sub-agent actor runs batched on its engine at once
    ack_wait_s: float = 60.0  # JetStream ack wait; held work is kept alive with progress acks well inside it
    tick_s: float = 1.0  # how often aligners and the controller check timeouts and keep held messages alive

    def __post_init__(self) -> None:
        for name in ("steps", "queries_per_step", "rollouts_per_query", "main_queries_in_flight", "sub_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"pipeline.{name} must be >= 1, got {getattr(self, name)}")
        if self.call_retries < 0:
            raise ValueError(f"pipeline.call_retries must be >= 0, got {self.call_retries}")
        for name in ("rollout_timeout_s", "subtask_timeout_s", "tool_timeout_s", "ack_wait_s", "tick_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"pipeline.{name} must be > 0, got {getattr(self, name)}")
        if self.tick_s * 3 > self.ack_wait_s:
            raise ValueError(f"pipeline.tick_s ({self.tick_s}) must be at most a third of pipeline.ack_wait_s ({self.ack_wait_s}) so held messages are kept alive")
        if self.dataset != "synthetic" and not Path(self.dataset).is_file():
            raise ValueError(f"pipeline.dataset {self.dataset!r} is neither 'synthetic' nor an existing JSONL file")
        if self.levels is not None and not self.levels:
            raise ValueError("pipeline.levels must name at least one level, or be null for all")
