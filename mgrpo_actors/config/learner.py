"""The `learners` section of the node config: one DeepSpeed learner per agent (docs/architecture.md §Engines),
and how new weights reach that agent's rollout engines (§One training step, step 6)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["LearnerConfig", "LearnersConfig", "WeightsConfig"]


@dataclass(frozen=True)
class LearnerConfig:
    """One agent's learner."""

    frozen: bool = False
    """this agent does not train (main-only baseline: a frozen sub-agent); its batches go unread"""
    zero_stage: int = 2
    """DeepSpeed ZeRO stage 0-3 (partitions optimizer state, gradients, parameters over ranks)"""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """training dtype of the model (the loss is always computed in fp32)"""
    device: str = "cpu"
    """"cpu" (gloo) or "cuda" (nccl)"""
    lr: float = 1e-6
    """AdamW learning rate (reference code: 1e-6)"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    max_grad_norm: float = 1.0
    """gradient clipping by global norm; 0 = off"""
    micro_batch_samples: int = 4
    """samples per forward/backward; gradients accumulate over the whole batch"""
    export_every: int = 0
    """also save the model as a plain HF directory every N steps and after the last, under <run
    dir>/exports/<side>/step<N>, all kept (for evaluation along the run: mgrpo compare); 0 = never"""
    checkpoint_every: int = 1
    """save model, optimizer and applied batches every N steps (<run dir>/checkpoints/<side>); batches are acked only
    once checkpointed; 0 = never (ack at once; a restart resumes from the last published weights)"""

    def __post_init__(self) -> None:
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"learner zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if not self.lr > 0:
            raise ValueError(f"learner lr must be > 0, got {self.lr}")
        if self.micro_batch_samples < 1:
            raise ValueError(f"learner micro_batch_samples must be >= 1, got {self.micro_batch_samples}")
        if self.max_grad_norm < 0 or self.weight_decay < 0 or self.checkpoint_every < 0 or self.export_every < 0:
            raise ValueError("learner max_grad_norm, weight_decay, checkpoint_every and export_every must be >= 0")
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ValueError(f"learner device must be cpu or cuda[:N], got {self.device!r}")

    def export_steps(self, total_steps: int) -> list[int]:
        """After how many applied steps the learner exports its model (export_every): every N and the last."""
        if not self.export_every:
            return []
        return sorted({*range(self.export_every, total_steps + 1, self.export_every), total_steps})


@dataclass(frozen=True)
class WeightsConfig:
    """How a learner's new weights reach its side's rollout engines."""

    transport: Literal["object-store", "directory"] = "object-store"
    """NATS object store (works across servers) or a shared directory"""
    directory: str = "runs/weights"
    """where "directory" writes <run>/<side>/v<version>.safetensors (shared by learner and agents)"""
    keep_versions: int = 2
    """versions kept in the store or directory; older ones are deleted"""


@dataclass(frozen=True)
class LearnersConfig:
    """Both agents' learners."""

    main: LearnerConfig = field(default_factory=LearnerConfig)
    """the main agent's learner"""
    sub: LearnerConfig = field(default_factory=LearnerConfig)
    """the sub-agent's learner"""
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    """weight sync to the rollout engines"""
