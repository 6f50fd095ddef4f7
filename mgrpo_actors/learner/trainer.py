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

One rank runs ZeRO stage 0 whatever `zero_stage` says, with no gradient all-reduce: ZeRO-1/2/3 over one
rank partition nothing, yet copy every gradient into buckets, keep a flat fp32 copy of the weights and
copy it back after each step (SmolLM2, one sample of 128 tokens: 5× plain torch's step; `mgrpo bench
learner`). Under ZeRO-0 in fp32 the trainer clips the gradients itself (torch's clip_grad_norm_, the
norm it reports), since DeepSpeed reports no norm there. Logprobs come from the last hidden states and
the lm_head per chunk of loss positions (forward.py), and the learner computes with
`learners.<side>.torch_threads` threads while it applies a batch. With algo.objective.kl_coef > 0 a
frozen reference policy (reference.py) scores every micro-batch too, without grad, for the KL term.
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
from mgrpo_actors.learner.forward import chunkable, micro_batch_log_probs, no_dropout
from mgrpo_actors.learner.micro_batches import MicroBatch, micro_batches, target_mask_sums, trainable_rows
from mgrpo_actors.learner.reference import ReferencePolicy, learner_dtype, reference_model
from mgrpo_actors.learner.shared_prefix import shared_prefix_length, shares_prefixes
from mgrpo_actors.learner.shm_op import load_shm_op
from mgrpo_actors.learner.threads import applying_here, rebalance_threads, torch_threads
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
    mismatch: float = 0.0  # mean |logprob_learner − logprob_engine| per loss token (docs/method.md §Objective)
    tis_weight_mean: float | None = None  # mean truncated importance weight, when algo.objective.tis_cap is on
    tis_clip_fraction: float | None = None  # fraction of loss tokens whose weight was cut at tis_cap, when on
    kl_ref: float | None = None  # mean KL(π_θ ‖ π_ref) per loss token, when algo.objective.kl_coef > 0
    kl_loss: float | None = None  # kl_coef · KL, the KL term's share of `loss`, when kl_coef > 0

    def as_dict(self) -> dict[str, float]:
        values = ((name, getattr(self, name)) for name in self.__dataclass_fields__)
        return {name: float(value) for name, value in values if value is not None}


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

    load_shm_op()  # under our own lock first: a killed loader's lock file would stall init_distributed
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


def zero_stage(cfg: LearnerConfig, world_size: int) -> int:
    """The ZeRO stage the learner runs: the config's with several ranks; 0 on one rank, where there is
    nothing to partition or reduce and ZeRO's flat fp32 copies, gradient buckets and reductions over one
    rank only cost time and memory (mgrpo bench learner)."""
    return cfg.zero_stage if world_size > 1 else 0


def own_clipping(cfg: LearnerConfig, stage: int) -> bool:
    """Whether the trainer clips (and measures) the gradient norm itself rather than DeepSpeed: under
    ZeRO-0 in fp32, whose gradients are whole on every rank once reduced (DeepSpeed would clip them
    there too, but reports no norm). In bf16 DeepSpeed's own optimizer wrapper holds the gradients: it clips."""
    return stage == 0 and cfg.dtype != "bfloat16"


def deepspeed_config(cfg: LearnerConfig, world_size: int = 1) -> dict[str, Any]:
    """DeepSpeed's config for this learner (micro-batches are ours: DeepSpeed sees batches of 1 step)."""
    stage = zero_stage(cfg, world_size)
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_samples,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.0 if own_clipping(cfg, stage) else cfg.max_grad_norm,
        "zero_optimization": {"stage": stage},
        "bf16": {"enabled": cfg.dtype == "bfloat16"},
        "steps_per_print": 1_000_000_000,
        "wall_clock_breakdown": False,
    }


class PolicyTrainer:
    """A model, its DeepSpeed engine and optimizer; `apply(batch)` takes one optimizer step.

    reference: the KL term's frozen reference (reference.py reference_model), used when
    algo.objective.kl_coef > 0; None then: built from `model` as given (learners.<side>.reference, or a
    copy of its weights now). A caller whose `model` already holds resumed weights passes the one it
    built before resuming.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        pad_id: int,
        cfg: LearnerConfig,
        objective: ObjectiveConfig,
        reference: torch.nn.Module | None = None,
    ) -> None:
        import deepspeed  # imported here: only learners need it

        if not torch.distributed.is_initialized():
            init_process_group("gloo" if cfg.device == "cpu" else "nccl")
        self.cfg = cfg
        self.objective = objective
        self.pad_id = pad_id
        if objective.kl_coef > 0 and reference is None:  # copied before DeepSpeed (ZeRO-3) partitions `model`
            reference = reference_model(cfg, objective, model)
        model = model.to(dtype=learner_dtype(cfg)).train()
        dropped = no_dropout(model)  # the engines sample without dropout: so does the learner score
        if dropped:
            log.info("learner dropout set to 0", layers=dropped)
        if cfg.activation_checkpointing:  # learners.<side>.activation_checkpointing
            model.activation_checkpointing_enable({"use_reentrant": False})
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        world_size = torch.distributed.get_world_size()
        self.zero_stage = zero_stage(cfg, world_size)
        self._own_clipping = own_clipping(cfg, self.zero_stage)
        config = deepspeed_config(cfg, world_size)
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        self.world_size = self.engine.world_size
        self.rank = torch.distributed.get_rank()
        if self.world_size == 1:
            self.engine.enable_backward_allreduce = False  # an all-reduce over one rank: copies, nothing else
        # learners.<side>.logprob_chunk_tokens: logprobs from the last hidden states, a chunk at a time (forward.py)
        chunk = cfg.logprob_chunk_tokens
        self.logprob_chunk = (
            chunk if chunk > 0 and chunkable(self.engine, self.engine.module, self.engine.device) else None
        )
        self.shared_prefix = shares_prefixes(cfg, self.zero_stage, self.engine.module)
        kl_on = objective.kl_coef > 0 and reference is not None
        self.reference = ReferencePolicy.on(reference, cfg, self.engine.device) if kl_on else None
        # Set on rank 0 of several (ranks.lead): called with a command and its payload before each collective call.
        self.announce: Callable[[str, Any], None] | None = None

    @property
    def module(self) -> torch.nn.Module:
        return self.engine.module

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights (ZeRO-3 partitions them over ranks: gathered here, by every rank,
        and only rank 0 gets them)."""
        if self.zero_stage == 3:
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
        # The reference's no-grad forward first, so the policy's graph is not held while it runs.
        ref_logprobs = None if self.reference is None else self.reference.log_probs(mb, device)
        # fp32, under the sampling distribution; off the loss positions 0 when chunked
        prefix = shared_prefix_length(mb, self.cfg.shared_prefix_tokens) if self.shared_prefix else 0
        logprobs = micro_batch_log_probs(self.engine, self.engine.module, mb, self.logprob_chunk, device, prefix)
        loss, stats = clipped_policy_loss(
            logprobs,
            mb.old_logprobs.to(device),
            mb.advantages.to(device),
            mb.loss_mask.to(device),
            self.objective,
            ref_logprobs=ref_logprobs,
            global_denominator=denominator,
        )
        # docs/method.md §Objective: the global denominator already scales the loss; undo DeepSpeed's rank averaging.
        self.engine.backward(loss * (self.world_size * weight), scale_wrt_gas=False)
        return stats

    @property
    def _optional_names(self) -> tuple[str, ...]:
        """Per-token statistics reported only while their term is on: truncated importance sampling
        (algo.objective.tis_cap), the KL to the reference (kl_coef > 0)."""
        tis = ("tis_weight_mean", "tis_clip_fraction") if self.objective.tis_cap is not None else ()
        return (*tis, "kl_ref") if self.reference is not None else tis

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

        The denominator is the whole batch's; without a KL term (kl_coef 0) samples with advantage 0
        are then left out of the forward and backward passes (their loss and gradient are exactly 0;
        with the KL term they are not, and are trained on). This rank takes every world-size-th of the
        remaining rows and pads its micro-batches with zero-weight ones up to the busiest rank's count.
        Returns (summed loss and token-weighted statistics, micro-batches, samples), all over every rank;
        0 micro-batches when the batch holds no signal (the same answer on every rank: it is decided
        from the whole batch).
        """
        sums = target_mask_sums(batch)
        # docs/method.md §Objective: the global batch's
        denominator = loss_denominator(sums, self.objective) if len(sums) else 0.0
        rows = trainable_rows(batch, skip_zero_advantage=self.objective.kl_coef == 0)
        # Shares of the loss (already over the global denominator) add up; per-token means are token-weighted.
        shares = ("loss", "kl_loss") if self.reference is not None else ("loss",)
        weighted = ("clip_fraction", "approx_kl", "ratio_mean", "mismatch", *self._optional_names)
        names = (*shares, *weighted, "tokens")
        totals = dict.fromkeys(names, 0.0)
        if denominator <= 0 or not rows:
            return totals, 0, 0
        shard = rows[self.rank :: self.world_size]
        mbs = micro_batches(batch, self.cfg.micro_batch_samples, self.pad_id, shard) if shard else []
        rounds = self._rounds(len(mbs))
        stand_in = micro_batches(batch, 1, self.pad_id, rows[:1])[0] if len(mbs) < rounds else None
        for i in range(rounds):
            rebalance_threads(self.cfg)
            real = i < len(mbs)
            stats = self._micro_step(
                mbs[i] if real else stand_in, denominator, last=i == rounds - 1, weight=1.0 if real else 0.0
            )
            if not real:
                continue
            for name in shares:
                totals[name] += getattr(stats, name)
            for name in weighted:
                totals[name] += getattr(stats, name) * stats.num_tokens
            totals["tokens"] += stats.num_tokens
        *summed, num_micro, samples = self._summed([*totals.values(), len(mbs), sum(len(mb.sample_ids) for mb in mbs)])
        return dict(zip(names, summed)), int(num_micro), int(samples)

    def _clip_gradients(self) -> float:
        """The gradients' global norm, clipped to learners.<side>.max_grad_norm (0: only measured)."""
        params = [p for p in self.engine.module.parameters() if p.grad is not None]
        if self.cfg.max_grad_norm > 0:
            return float(torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm))
        return float(torch.nn.utils.get_total_norm([p.grad for p in params]))

    @timed(LEARN)
    def apply(self, batch: AlignedBatch) -> StepStats:
        """One optimizer step on `batch` (every chunk of it, concatenated); a batch with no signal takes
        no step ([ours]: Adam's momentum alone would still move the weights on a step that learned nothing)."""
        started = time.perf_counter()
        if self.announce is not None:
            self.announce(CMD_APPLY, batch)
        # learners.<side>.torch_threads; 0: the cores, shared with the learners of this process applying now
        with applying_here() as applying, torch_threads(self.cfg.threads(applying)):
            totals, num_micro, samples = self.accumulate(batch)
            if num_micro == 0:
                return StepStats(0.0, 0.0, 0.0, 1.0, 0.0, 0, 0, time.perf_counter() - started, 0.0)
            grad_norm = self._clip_gradients() if self._own_clipping else None
            self.engine.step()
        if grad_norm is None:
            grad_norm = self.engine.get_global_grad_norm()
        tokens = totals["tokens"]
        extra = {name: totals[name] / tokens if tokens else 0.0 for name in self._optional_names}
        if self.reference is not None:
            extra["kl_loss"] = totals["kl_loss"]
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
            mismatch=totals["mismatch"] / tokens if tokens else 0.0,
            **extra,
        )
