"""`PolicyTrainer`: one agent's model under a DeepSpeed engine, applying aligned batches with the clipped
objective (docs/method.md §Objective).

The objective normalises by the *global* batch (objective.py: micro-batch losses add up to the
full-batch loss), so DeepSpeed must not scale again: every micro-batch's backward runs with
`scale_wrt_gas=False` and the accumulation boundary is set by hand on the batch's last micro-batch,
then one optimizer step. With several ranks (ranks.py) every rank holds the whole batch and trains on
its own shard of the trainable rows (row i on rank i mod world size); the denominator is still the
whole batch's, so the ranks' losses add up to the one-rank loss, and each rank's loss is multiplied by
the world size to undo DeepSpeed's averaging of gradients over ranks. ZeRO reduces collectively, so
every rank runs as many micro-batches as the busiest one: a rank with fewer runs zero-weight ones (a
real row, loss × 0) rather than skipping them. Whether a step is taken is decided from the whole
batch, which every rank has, so all ranks agree without talking; the statistics are summed over ranks.
On CPU the process group is gloo (MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK; set to a one-rank
group here when absent) and the optimizer is a client `torch.optim.AdamW` (DeepSpeed's own CPU Adam
compiles for ~45 s on first use).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.algo.objective import clipped_policy_loss, loss_denominator
from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.engines.logprobs import token_log_probs
from mgrpo_actors.learner.micro_batches import MicroBatch, micro_batches, target_mask_sums, trainable_rows
from mgrpo_actors.log import get_logger
from mgrpo_actors.phases import LEARN, timed
from protocols import AlignedBatch

__all__ = [
    "CMD_APPLY",
    "CMD_CHECKPOINT",
    "CMD_STATE",
    "PolicyTrainer",
    "StepStats",
    "deepspeed_config",
    "ensure_process_group_env",
    "init_process_group",
]

log = get_logger(__name__)

# What rank 0's trainer announces before each collective call it makes (ranks.py: the other ranks then make it too).
CMD_APPLY, CMD_STATE, CMD_CHECKPOINT = "apply", "state", "checkpoint"


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


def ensure_process_group_env() -> bool:
    """A one-rank process group on this host unless a launcher (torchrun, deepspeed) set one up.
    True if this picked MASTER_PORT (a free port now, which another process may take before the group
    listens on it: the caller may then pick again)."""
    picked = "MASTER_PORT" not in os.environ
    if picked:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(name, value)
    return picked


def init_process_group(backend: str, attempts: int = 3) -> None:
    """The process group (deepspeed.init_distributed), on a fresh port again if one we picked was taken
    meanwhile (a race with any process opening a connection, which measured as a rare failed start).
    A port picked here is removed from the environment once the group listens on it, so processes
    started from this one (tests, benches) pick their own instead of colliding with it."""
    import deepspeed

    for attempt in range(attempts):
        picked = ensure_process_group_env()
        try:
            deepspeed.init_distributed(dist_backend=backend)
        except torch.distributed.DistNetworkError as exc:
            if not picked or attempt == attempts - 1:
                raise
            log.warning("process group port taken; picking another", port=os.environ["MASTER_PORT"], error=str(exc))
            del os.environ["MASTER_PORT"]
            continue
        if picked:
            del os.environ["MASTER_PORT"]
        return


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

        if not torch.distributed.is_initialized():
            init_process_group("gloo" if cfg.device == "cpu" else "nccl")
        self.cfg = cfg
        self.objective = objective
        self.pad_id = pad_id
        model = model.to(dtype=torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=deepspeed_config(cfg))
        self.world_size = self.engine.world_size
        self.rank = torch.distributed.get_rank()
        # Set on rank 0 of several (ranks.lead): called with a command and its payload before each collective call.
        self.announce: Callable[[str, Any], None] | None = None

    @property
    def module(self) -> torch.nn.Module:
        return self.engine.module

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights (ZeRO-3 partitions them over ranks: gathered here, by every rank,
        and only rank 0 gets them)."""
        if self.cfg.zero_stage == 3:
            if self.announce is not None:
                self.announce(CMD_STATE, None)
            return self.engine._zero3_consolidated_16bit_state_dict()
        return self.engine.module.state_dict()

    def save_checkpoint(self, directory: str, tag: str, client_state: dict[str, Any]) -> None:
        """DeepSpeed's checkpoint (model, optimizer, this rank's ZeRO partition): every rank must call it."""
        if self.announce is not None:
            self.announce(CMD_CHECKPOINT, (directory, tag, client_state))
        self.engine.save_checkpoint(directory, tag=tag, client_state=client_state)

    def _micro_step(self, mb: MicroBatch, denominator: float, last: bool, weight: float = 1.0) -> Any:
        """Forward and backward of one micro-batch; `weight` 0 makes it a stand-in that adds no gradient."""
        device = self.engine.device
        self.engine.set_gradient_accumulation_boundary(last)
        logits = self.engine(input_ids=mb.input_ids.to(device), attention_mask=mb.attention_mask.to(device)).logits[
            :, :-1
        ]
        logprobs = token_log_probs(logits, mb.targets.to(device), mb.sampling)  # fp32, under the sampling distribution
        loss, stats = clipped_policy_loss(
            logprobs,
            mb.old_logprobs.to(device),
            mb.advantages.to(device),
            mb.loss_mask.to(device),
            self.objective,
            global_denominator=denominator,
        )
        # docs/method.md §Objective: the global denominator already scales the loss; undo DeepSpeed's rank averaging.
        self.engine.backward(loss * (self.world_size * weight), scale_wrt_gas=False)
        return stats

    def _rounds(self, mine: int) -> int:
        """Micro-batches every rank runs: the most any rank has (ZeRO's reductions are collective)."""
        if self.world_size == 1:
            return mine
        count = torch.tensor([mine], dtype=torch.int64, device=self.engine.device)
        torch.distributed.all_reduce(count, op=torch.distributed.ReduceOp.MAX)
        return int(count.item())

    def _summed(self, values: list[float]) -> list[float]:
        """`values` summed over the ranks (each rank has its shard's totals; the sum is the whole batch's)."""
        if self.world_size == 1:
            return values
        total = torch.tensor(values, dtype=torch.float64, device=self.engine.device)
        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM)
        return total.tolist()

    def accumulate(self, batch: AlignedBatch) -> tuple[dict[str, float], int, int]:
        """Forward and backward over this rank's micro-batches of `batch`, gradients accumulated (no step).

        The denominator is the whole batch's; samples with advantage 0 are then left out of the
        forward and backward passes (without a KL term their loss and gradient are exactly 0). This
        rank takes every world-size-th of the remaining rows and pads its micro-batches with
        zero-weight ones up to the busiest rank's count. Returns (summed loss and token-weighted
        statistics, micro-batches, samples), all over every rank; 0 micro-batches when the batch holds
        no signal (the same answer on every rank: it is decided from the whole batch).
        """
        sums = target_mask_sums(batch)
        # docs/method.md §Objective: the global batch's
        denominator = loss_denominator(sums, self.objective) if len(sums) else 0.0
        rows = trainable_rows(batch, skip_zero_advantage=self.objective.kl_coef == 0)
        names = ("loss", "clip_fraction", "approx_kl", "ratio_mean", "tokens")
        totals = dict.fromkeys(names, 0.0)
        if denominator <= 0 or not rows:
            return totals, 0, 0
        shard = rows[self.rank :: self.world_size]
        mbs = micro_batches(batch, self.cfg.micro_batch_samples, self.pad_id, shard) if shard else []
        rounds = self._rounds(len(mbs))
        stand_in = micro_batches(batch, 1, self.pad_id, rows[:1])[0] if len(mbs) < rounds else None
        for i in range(rounds):
            real = i < len(mbs)
            stats = self._micro_step(
                mbs[i] if real else stand_in, denominator, last=i == rounds - 1, weight=1.0 if real else 0.0
            )
            if not real:
                continue
            totals["loss"] += stats.loss  # micro-batch losses add up to the batch's loss
            for name in ("clip_fraction", "approx_kl", "ratio_mean"):
                totals[name] += getattr(stats, name) * stats.num_tokens
            totals["tokens"] += stats.num_tokens
        *summed, num_micro, samples = self._summed([*totals.values(), len(mbs), sum(len(mb.sample_ids) for mb in mbs)])
        return dict(zip(names, summed)), int(num_micro), int(samples)

    @timed(LEARN)
    def apply(self, batch: AlignedBatch) -> StepStats:
        """One optimizer step on `batch` (every chunk of it, concatenated); a batch with no signal takes
        no step ([ours]: Adam's momentum alone would still move the weights on a step that learned nothing)."""
        started = time.perf_counter()
        if self.announce is not None:
            self.announce(CMD_APPLY, batch)
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
