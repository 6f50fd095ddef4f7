"""The `learners` section of the node config: one DeepSpeed learner per agent (docs/architecture.md §Engines),
and how new weights reach that agent's rollout engines (§One training step, step 6)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from mgrpo_actors.config.dtypes import resolve_dtype
from mgrpo_actors.config.loader import ENTRIES_START_FROM

__all__ = ["LearnerConfig", "LearnersConfig", "WeightsConfig"]


def _local_ranks() -> int:
    """Ranks of this learner on this host: torchrun's LOCAL_WORLD_SIZE, the deepspeed launcher's LOCAL_SIZE,
    else WORLD_SIZE when the group's address is this host's loopback (every rank here), else 1."""
    env = os.environ
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE"):
        if env.get(name, "").isdigit():
            return max(1, int(env[name]))
    if env.get("MASTER_ADDR") in ("127.0.0.1", "localhost", "::1") and env.get("WORLD_SIZE", "").isdigit():
        return max(1, int(env["WORLD_SIZE"]))
    return 1


@dataclass(frozen=True)
class LearnerConfig:
    """One agent's learner."""

    frozen: bool = False
    """this agent does not train (main-only baseline: a frozen sub-agent); its batches go unread"""
    zero_stage: int = 2
    """DeepSpeed ZeRO stage 0-3 (partitions optimizer state, gradients, parameters over ranks); a one-rank
    learner runs stage 0 whatever this says: nothing to partition, and ZeRO's copies cost time ([ours])"""
    dtype: Literal["float32", "bfloat16", "auto"] = "float32"
    """training dtype of the model (the loss is always computed in fp32); auto: bfloat16 where this host's device
    computes it natively, else float32 (config/dtypes.py)"""
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
    torch_threads: int = 0
    """torch CPU threads while this learner applies a batch; 0 = every core the process may use
    (len(os.sched_getaffinity(0)), shared out among the ranks a launcher starts on the host and the learners
    of one process applying a batch at the same time) ([ours]; the agents' engines keep agents.torch_threads)"""
    logprob_chunk_tokens: int = 1024
    """loss positions per chunk of the lm_head and log-softmax: the logits [positions, vocab] never exist
    whole, and with more positions than one chunk each chunk is recomputed in backward
    (mgrpo_actors/learner/forward.py); 0 = the model's own logits at every position at once ([ours])"""
    shared_prefix_tokens: int = 32
    """compute the prefix that every sample of a micro-batch shares (the system prompt and worked example, a
    question's K rollouts) once per micro-batch instead of once per sample, when at least this many tokens
    long; values and gradients are the full forward's (mgrpo_actors/learner/shared_prefix.py). Llama, Qwen2
    and Qwen3 models attending through sdpa, without activation checkpointing, below ZeRO-3; elsewhere every
    sample runs whole.
    It pays with micro_batch_samples > 1; 0 = off ([ours])"""
    activation_checkpointing: bool = False
    """recompute each transformer layer's activations in backward instead of keeping them all (transformers'
    activation checkpointing): a micro-batch's activations shrink to the layers' inputs and one layer's at a
    time, for about one more forward pass of compute; long samples need it: SmolLM2, 4 × 2,600 tokens,
    15 GiB without, 3.9 GiB with (docs/benchmarks.md §`learner`: a learner step beside plain torch) ([ours]:
    off)"""
    export_every: int = 0
    """also save the model as a plain HF directory every N steps and after the last, under <run
    dir>/exports/<side>/step<N>, all kept (for evaluation along the run: mgrpo compare); 0 = never"""
    checkpoint_every: int = 1
    """save model, optimizer and applied batches every N steps (<run dir>/checkpoints/<side>); batches are acked only
    once checkpointed; 0 = never (ack at once; a restart resumes from the last published weights)"""
    reference: str | None = None
    """the frozen reference policy of the KL term (algo.objective.kl_coef > 0; built only then, and refused
    without it): null = this learner's starting weights, agents.<side>.model as loaded before any step (a
    resumed learner too: never its checkpoint's or the announced weights); else a model spec to load as the
    reference, as agents.<side>.model takes one: a local HF model directory (an export <run
    dir>/exports/<side>/step<N>, a checkpoint's <run dir>/checkpoints/<side>/<tag>/hf), tiny:main, smollm2;
    its vocabulary must be the agent's. One more copy of the weights in the learner's dtype, a plain module
    beside the DeepSpeed engine, whole on every rank under ZeRO-3 too, and one more forward pass (no grad)
    per micro-batch (docs/method.md §Objective)"""

    def __post_init__(self) -> None:
        # auto is resolved here, on the host that loads the config: the learner's own device decides
        object.__setattr__(self, "dtype", resolve_dtype(self.dtype, self.device))
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"learner zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if not self.lr > 0:
            raise ValueError(f"learner lr must be > 0, got {self.lr}")
        if self.micro_batch_samples < 1:
            raise ValueError(f"learner micro_batch_samples must be >= 1, got {self.micro_batch_samples}")
        if self.torch_threads < 0 or self.logprob_chunk_tokens < 0 or self.shared_prefix_tokens < 0:
            raise ValueError(
                "learner torch_threads, logprob_chunk_tokens and shared_prefix_tokens must be >= 0, "
                f"got {self.torch_threads}, {self.logprob_chunk_tokens} and {self.shared_prefix_tokens}"
            )
        if self.max_grad_norm < 0 or self.weight_decay < 0 or self.checkpoint_every < 0 or self.export_every < 0:
            raise ValueError("learner max_grad_norm, weight_decay, checkpoint_every and export_every must be >= 0")
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ValueError(f"learner device must be cpu or cuda[:N], got {self.device!r}")
        if self.reference is not None and not (isinstance(self.reference, str) and self.reference.strip()):
            raise ValueError(
                f"learner reference must be a model spec or null (the starting weights), got {self.reference!r}"
            )

    def threads(self, applying_here: int = 1) -> int:
        """The torch threads this learner computes with: torch_threads, or for 0 the cores this process may
        use (its CPU affinity), divided among the learner's ranks on this host (_local_ranks) and among the
        `applying_here` learners of this process applying a batch now, this one included (--role all runs
        both; OpenMP's thread count is per calling thread, so each would otherwise take every core)."""
        if self.torch_threads:
            return self.torch_threads
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return max(1, cores // (_local_ranks() * max(1, applying_here)))

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
    """the newest versions kept in the store or directory, besides every version from the newest full snapshot on
    (what an engine that missed some needs to catch up); older ones are deleted"""
    full_every: int = 10
    """a full snapshot every N versions, and always the first after a learner starts, restarts or resumes; the
    versions between are deltas against the one before (the changed tensors, or only their changed elements:
    docs/architecture.md §Delivery and state); 1 = every version a full snapshot ([ours])"""

    def __post_init__(self) -> None:
        if self.keep_versions < 1 or self.full_every < 1:
            raise ValueError(
                f"learners.weights keep_versions and full_every must be >= 1, got {self.keep_versions} and "
                f"{self.full_every}"
            )


@dataclass(frozen=True)
class LearnersConfig:
    """Both agents' learners."""

    main: LearnerConfig = field(default_factory=LearnerConfig)
    """the main agent's learner"""
    sub: LearnerConfig = field(default_factory=LearnerConfig)
    """the sub-agent's learner; with agents.subs, what every sub-agent type's learner starts from"""
    subs: dict[str, LearnerConfig] = field(default_factory=dict, metadata={ENTRIES_START_FROM: "sub"})
    """the learners of agents.subs' types, by type name: each type's keys replace learners.sub's, which it starts
    from; a type not named here has learners.sub's settings"""
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    """weight sync to the rollout engines"""
