"""`PolicyTrainer`: one agent's model under a DeepSpeed engine, applying aligned batches with the clipped
objective (m-grpo.md §Objective).

The objective normalises by the *global* batch (objective.py: micro-batch losses add up to the
full-batch loss), so DeepSpeed must not scale again: every micro-batch's backward runs with
`scale_wrt_gas=False` and the accumulation boundary is set by hand on the batch's last micro-batch,
then one optimizer step. With several ranks DeepSpeed averages gradients over them; each rank's loss
is multiplied by the world size to undo that, and the denominator is the whole batch's on every rank.
On CPU the process group is gloo (MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK; set to a one-rank
group here when absent) and the optimizer is a client `torch.optim.AdamW` (DeepSpeed's own CPU Adam
compiles for ~45 s on first use).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import torch

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.algo.objective import clipped_policy_loss, loss_denominator
from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.engines.logprobs import token_log_probs
from mgrpo_actors.learner.micro_batches import MicroBatch, micro_batches, target_mask_sums, trainable_rows
from mgrpo_actors.log import get_logger
from protocols import AlignedBatch

__all__ = ["PolicyTrainer", "StepStats", "deepspeed_config", "ensure_process_group_env"]

log = get_logger(__name__)


@dataclass(frozen=True)
class StepStats:
    """What one applied batch did."""

    loss: float
    clip_fraction: float
    approx_kl: float
    ratio_mean: float
    tokens: float  # loss tokens in the batch
    samples: int  # samples trained on (placeholders excluded)
    micro_batches: int
    seconds: float
    grad_norm: float

    def as_dict(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in self.__dataclass_fields__}


def ensure_process_group_env() -> None:
    """A one-rank process group on this host unless a launcher (torchrun, deepspeed) set one up."""
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(name, value)


def deepspeed_config(cfg: LearnerConfig) -> dict[str, Any]:
    """DeepSpeed's config for this learner (micro-batches are ours: DeepSpeed sees batches of 1 step)."""
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_samples,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": cfg.max_grad_norm,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": cfg.dtype == "bfloat16"},
        "steps_per_print": 1_000_000_000,
        "wall_clock_breakdown": False,
    }


class PolicyTrainer:
    """A model, its DeepSpeed engine and optimizer; `apply(batch)` takes one optimizer step."""

    def __init__(self, model: torch.nn.Module, pad_id: int, cfg: LearnerConfig, objective: ObjectiveConfig) -> None:
        import deepspeed  # imported here: only learners need it

        ensure_process_group_env()
        if not torch.distributed.is_initialized():
            deepspeed.init_distributed(dist_backend="gloo" if cfg.device == "cpu" else "nccl")
        self.cfg = cfg
        self.objective = objective
        self.pad_id = pad_id
        model = model.to(dtype=torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=deepspeed_config(cfg))
        self.world_size = self.engine.world_size

    @property
    def module(self) -> torch.nn.Module:
        return self.engine.module

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights (ZeRO-3 partitions them over ranks: gathered here)."""
        if self.cfg.zero_stage == 3:
            return self.engine._zero3_consolidated_16bit_state_dict()
        return self.engine.module.state_dict()

    def _micro_step(self, mb: MicroBatch, denominator: float, last: bool) -> Any:
        device = self.engine.device
        self.engine.set_gradient_accumulation_boundary(last)
        logits = self.engine(input_ids=mb.input_ids.to(device), attention_mask=mb.attention_mask.to(device)).logits[:, :-1]
        logprobs = token_log_probs(logits, mb.targets.to(device), mb.sampling)  # fp32, under the sampling distribution
        loss, stats = clipped_policy_loss(
            logprobs, mb.old_logprobs.to(device), mb.advantages.to(device), mb.loss_mask.to(device), self.objective,
            global_denominator=denominator,
        )  # fmt: skip
        # m-grpo.md §Objective: the global denominator already scales the loss; undo DeepSpeed's rank averaging.
        self.engine.backward(loss * self.world_size, scale_wrt_gas=False)
        return stats

    def accumulate(self, batch: AlignedBatch) -> tuple[dict[str, float], int, int]:
        """Forward and backward over every micro-batch of `batch`, gradients accumulated (no step).

        The denominator is the whole batch's; samples with advantage 0 are then left out of the
        forward and backward passes (without a KL term their loss and gradient are exactly 0).
        Returns (summed loss and token-weighted statistics, micro-batches, samples); 0 micro-batches
        when the batch holds no signal.
        """
        sums = target_mask_sums(batch)
        denominator = loss_denominator(sums, self.objective) if len(sums) else 0.0  # m-grpo.md §Objective: the global batch's
        skip_zero = self.objective.kl_coef == 0
        mbs = micro_batches(batch, self.cfg.micro_batch_samples, self.pad_id, trainable_rows(batch, skip_zero_advantage=skip_zero))
        totals = {"loss": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0, "ratio_mean": 0.0, "tokens": 0.0}
        if denominator <= 0:
            return totals, 0, 0
        for i, mb in enumerate(mbs):
            stats = self._micro_step(mb, denominator, last=i == len(mbs) - 1)
            totals["loss"] += stats.loss  # micro-batch losses add up to the batch's loss
            for name in ("clip_fraction", "approx_kl", "ratio_mean"):
                totals[name] += getattr(stats, name) * stats.num_tokens
            totals["tokens"] += stats.num_tokens
        return totals, len(mbs), sum(len(mb.sample_ids) for mb in mbs)

    def apply(self, batch: AlignedBatch) -> StepStats:
        """One optimizer step on `batch` (every chunk of it, concatenated); a batch with no signal takes
        no step ([ours]: Adam's momentum alone would still move the weights on a step that learned nothing)."""
        started = time.perf_counter()
        totals, num_micro, samples = self.accumulate(batch)
        if num_micro == 0:
            return StepStats(0.0, 0.0, 0.0, 1.0, 0.0, 0, 0, time.perf_counter() - started, 0.0)
        self.engine.step()
        grad_norm = self.engine.get_global_grad_norm()
        tokens = totals["tokens"]
        return StepStats(
            loss=totals["loss"],
            clip_fraction=totals["clip_fraction"] / tokens if tokens else 0.0,
            approx_kl=totals["approx_kl"] / tokens if tokens else 0.0,
            ratio_mean=totals["ratio_mean"] / tokens if tokens else 1.0,
            tokens=tokens,
            samples=samples,
            micro_batches=num_micro,
            seconds=time.perf_counter() - started,
            grad_norm=float(grad_norm) if grad_norm is not None else 0.0,
        )
