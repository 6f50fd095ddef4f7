"""The clipped policy objective each learner minimises, docs/method.md §Objective.

    loss per token = −min(ρ·A, clip(ρ, 1 − ε_low, 1 + ε_high)·A)  [+ kl_coef · KL(π_θ ‖ π_ref)]

ρ is the per-token ratio π_θ/π_old ("token", the reference code), the ratio of whole sequences, the
product over the sequence's loss tokens ("sequence", the paper), or that product's geometric mean over
the sequence's loss tokens ("sequence-mean", GSPO: Zheng et al. 2025); a sequence ratio is shared by
all its tokens. Token losses become one number by `aggregation`, always as numerator / denominator where
the denominator belongs to the *global* batch: pass `global_denominator=loss_denominator(full_mask)`
to every micro-batch and the micro-batch losses add up to the full-batch loss, so gradient
accumulation never changes the loss scale. Everything is computed in fp32 (fp64 if the log-probs are
fp64) whatever the model's dtype, token counts in fp64 (docs/method.md §Objective).

Engine/learner mismatch [ours]: `old_logprobs` are the engine's (the behaviour policy as sampled);
the learner's own logprobs at the pre-step weights, π_learner_old, are with one optimizer step per
batch the current forward's, detached (`learner_old_logprobs` overrides them). `recompute_old_logprobs`
takes π_learner_old as π_old; `tis_cap` multiplies each token's policy-gradient loss by
min(π_learner_old / π_engine, tis_cap), detached (truncated importance sampling, as verl's rollout
correction); the mean |log π_learner_old − log π_engine| over the loss tokens is always reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from mgrpo_actors.algo.config import ObjectiveConfig


@dataclass(frozen=True)
class PolicyLossStats:
    """What a user watches per (micro-)batch; means are over this batch's loss tokens."""

    loss: float
    # The clipped policy-gradient part of the loss.
    pg_loss: float
    # kl_coef · KL part of the loss; 0 when the KL term is off.
    kl_loss: float
    # Fraction of loss tokens whose clipped term was the one taken (the update was clipped).
    clip_fraction: float
    clip_fraction_low: float
    clip_fraction_high: float
    # k3 estimate of KL(π_old ‖ π_θ): how far the policy moved from the one that sampled.
    approx_kl: float
    ratio_mean: float
    ratio_max: float
    # Loss tokens (sum of the loss mask) in this batch.
    num_tokens: float
    # Mean entropy of the policy on loss tokens, when given.
    entropy: float | None = None
    # Mean KL(π_θ ‖ π_ref) on loss tokens with the configured estimator, when a reference is given.
    kl_ref: float | None = None
    # Mean |log π_learner_old − log π_engine| on loss tokens: how far the learner's logprobs are from the engine's.
    mismatch: float = 0.0
    # Mean truncated importance weight min(π_learner_old / π_engine, tis_cap) on loss tokens, when tis_cap is on.
    tis_weight_mean: float | None = None
    # Fraction of loss tokens whose importance weight was cut at tis_cap, when tis_cap is on.
    tis_clip_fraction: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return asdict(self)


def loss_denominator(loss_mask: torch.Tensor, cfg: ObjectiveConfig) -> float:
    """The aggregation's normaliser for a batch; compute it on the global batch (docs/method.md §Objective).

    token-mean: loss tokens. seq-mean-token-mean: sequences with at least one loss token (alignment
    placeholders, whose mask is all 0, do not count). seq-mean-token-sum-norm (Dr.GRPO): those
    sequences times the constant `max_response_tokens`.
    """
    mask = loss_mask.to(torch.float64)
    if cfg.aggregation == "token-mean":
        return float(mask.sum())
    sequences = float((mask.sum(dim=-1) > 0).sum())
    if cfg.aggregation == "seq-mean-token-mean":
        return sequences
    return sequences * float(cfg.max_response_tokens)


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str, clamp: float) -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) from samples of π_θ (Schulman's k1, k2, k3)."""
    log_r = torch.clamp(ref_logprobs - logprobs, -clamp, clamp)  # log π_ref/π_θ
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    return torch.exp(log_r) - 1.0 - log_r


def _validate(logprobs, old_logprobs, advantages, loss_mask, cfg, ref_logprobs, entropy, learner_old) -> None:
    if logprobs.ndim != 2:
        raise ValueError(f"logprobs must be 2-D (sequences, tokens), got shape {tuple(logprobs.shape)}")
    for name, tensor in (
        ("old_logprobs", old_logprobs),
        ("loss_mask", loss_mask),
        ("ref_logprobs", ref_logprobs),
        ("entropy", entropy),
        ("learner_old_logprobs", learner_old),
    ):
        if tensor is not None and tensor.shape != logprobs.shape:
            raise ValueError(
                f"{name} shape {tuple(tensor.shape)} does not match logprobs shape {tuple(logprobs.shape)}"
            )
    per_sequence = (logprobs.shape[0],)
    if tuple(advantages.shape) not in (per_sequence, tuple(logprobs.shape)):
        raise ValueError(
            f"advantages shape {tuple(advantages.shape)} must be {per_sequence} (per sequence) "
            f"or {tuple(logprobs.shape)} (per token)"
        )
    if cfg.ratio != "token" and advantages.ndim != 1:
        raise ValueError(f"ratio: {cfg.ratio} needs one advantage per sequence, shaped (N,)")
    if not bool(torch.isfinite(advantages).all()):
        raise ValueError("advantages contain NaN or inf")
    if cfg.kl_coef > 0 and ref_logprobs is None:
        raise ValueError("objective.kl_coef > 0 needs ref_logprobs")


def _compute_dtype(logprobs: torch.Tensor) -> torch.dtype:
    """fp32 for bf16/fp16/fp32 log-probs, fp64 for fp64 ones: never below fp32 (docs/method.md §Objective)."""
    return torch.float64 if logprobs.dtype == torch.float64 else torch.float32


def _ratio_and_advantages(
    token_log_ratio: torch.Tensor, on_loss: torch.Tensor, advantages: torch.Tensor, cfg: ObjectiveConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """ρ and A per token for cfg.ratio (docs/method.md §Objective); token_log_ratio is already 0 off the loss tokens.

    sequence: log ρ = Σ_t log-ratio (the paper's product). sequence-mean: log ρ = mean over the
    sequence's loss tokens (GSPO's length-normalised ratio); a sequence without loss tokens gets
    ρ = 1 and, its mask being 0, contributes 0. Both share ρ and one advantage across the sequence.
    sequence-mean accepts any aggregation: its per-token gradient is ρ·A/|y| on each of the |y| tokens,
    so seq-mean-token-mean gives GSPO's objective exactly, token-mean gives every token the weight
    token-level GRPO gives it (ρ·A per token, over the batch's tokens), and Dr.GRPO's normaliser stays a
    constant; none weights a sequence by its length twice, which is why only `sequence` is restricted.
    """
    mask_shape = token_log_ratio.shape
    if cfg.ratio == "token":
        per_token = advantages[:, None].expand(mask_shape) if advantages.ndim == 1 else advantages
        return torch.exp(token_log_ratio), per_token
    sequence_log_ratio = token_log_ratio.sum(dim=-1)
    if cfg.ratio == "sequence-mean":
        sequence_log_ratio = sequence_log_ratio / on_loss.sum(dim=-1).clamp_min(1).to(token_log_ratio.dtype)
    sequence_log_ratio = torch.clamp(sequence_log_ratio, -cfg.log_ratio_clamp, cfg.log_ratio_clamp)
    return torch.exp(sequence_log_ratio)[:, None].expand(mask_shape), advantages[:, None].expand(mask_shape)


def _kl_per_token(logprobs, ref_logprobs, on_loss, cfg: ObjectiveConfig) -> torch.Tensor:
    """KL(π_θ ‖ π_ref) per token; both inputs zeroed off the loss tokens so padding cannot put NaN in grads, and
    where π_θ's own top-k/top-p excludes the token (log π_θ = −inf, which a recomputed or bf16 learner can meet at
    the boundary): −inf − (−inf) is NaN where the reference excludes it too, and such a token adds no gradient
    anyway, as in the policy term. A token only the reference excludes counts at the clamp."""
    zeros = torch.zeros_like(logprobs)
    usable = on_loss & torch.isfinite(logprobs)
    return kl_estimate(
        torch.where(usable, logprobs, zeros),
        torch.where(usable, ref_logprobs.detach().to(logprobs.dtype), zeros),
        cfg.kl_estimator,
        cfg.log_ratio_clamp,
    )


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    cfg: ObjectiveConfig,
    *,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    global_denominator: float | None = None,
    learner_old_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """PPO-clip loss over a (micro-)batch and its statistics (docs/method.md §Objective).

    logprobs: (N, T) log π_θ of the sampled tokens, with grad. old_logprobs: (N, T) behaviour log-probs.
    advantages: (N,) per sequence or (N, T) per token. loss_mask: (N, T), 1 on the agent's own tokens
    (it may carry weights; alignment placeholders have an all-zero row). global_denominator: the
    global batch's `loss_denominator`; None means this batch is the global batch. learner_old_logprobs:
    (N, T) the learner's logprobs at the pre-step weights; None: `logprobs` detached (one optimizer step
    per batch). The loss is fp32 (fp64 for fp64 log-probs) whatever the dtype of logprobs; gradients
    still reach logprobs.
    """
    _validate(logprobs, old_logprobs, advantages, loss_mask, cfg, ref_logprobs, entropy, learner_old_logprobs)
    dtype = _compute_dtype(logprobs)
    logprobs = logprobs.to(dtype)  # differentiable: the gradient flows back to the model's dtype
    mask = loss_mask.to(dtype)
    on_loss = loss_mask > 0
    advantages = advantages.detach().to(dtype)
    zeros = torch.zeros_like(logprobs)
    engine_logprobs = old_logprobs.detach().to(dtype)
    learner_old = (logprobs if learner_old_logprobs is None else learner_old_logprobs).detach().to(dtype)
    # log π_learner_old / π_engine on the loss tokens (docs/method.md §Objective: the engine/learner mismatch).
    # Clamped like the ratio: a token outside the learner's top-k/top-p (log π_learner_old = −inf, which a bf16
    # or vLLM engine can sample at the boundary) counts as the largest mismatch, never as inf.
    mismatch_log = torch.where(on_loss, learner_old - engine_logprobs, zeros)
    mismatch_log = torch.clamp(mismatch_log, -cfg.log_ratio_clamp, cfg.log_ratio_clamp)
    behaviour = learner_old if cfg.recompute_old_logprobs else engine_logprobs
    # Zero the log-ratio off the loss tokens first, so padding garbage can never reach exp() or grads; and where
    # π_old is −inf (recomputed, such a token), since −inf − (−inf) is NaN: that token adds no gradient.
    token_log_ratio = torch.where(on_loss & torch.isfinite(behaviour), logprobs - behaviour, zeros)
    token_log_ratio = torch.clamp(token_log_ratio, -cfg.log_ratio_clamp, cfg.log_ratio_clamp)
    ratio, token_advantages = _ratio_and_advantages(token_log_ratio, on_loss, advantages, cfg)

    # docs/method.md §Objective: min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A), negated to a loss.
    unclipped = ratio * token_advantages
    clipped = torch.clamp(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * token_advantages
    pg_per_token = -torch.minimum(unclipped, clipped)
    tis_raw = tis_weight = None
    if cfg.tis_cap is not None:  # truncated importance sampling: detached, so it only scales the gradient
        tis_raw = torch.exp(mismatch_log)
        tis_weight = torch.clamp(tis_raw, max=cfg.tis_cap)
        pg_per_token = pg_per_token * tis_weight
    kl_per_token = None if ref_logprobs is None else _kl_per_token(logprobs, ref_logprobs, on_loss, cfg)
    kl_on = kl_per_token is not None and cfg.kl_coef > 0
    per_token = pg_per_token + cfg.kl_coef * kl_per_token if kl_on else pg_per_token

    denominator = loss_denominator(loss_mask, cfg) if global_denominator is None else float(global_denominator)
    if denominator <= 0 and bool(on_loss.any()):
        raise ValueError(f"global_denominator is {denominator} but this batch has loss tokens")
    scale = 1.0 / denominator if denominator > 0 else 0.0
    loss = _aggregate(per_token, mask, cfg) * scale

    with torch.no_grad():
        pg_loss = float(_aggregate(pg_per_token, mask, cfg) * scale)
        stats = PolicyLossStats(
            loss=float(loss),
            pg_loss=pg_loss,
            kl_loss=float(loss) - pg_loss,
            clip_fraction=_masked_mean(clipped < unclipped, mask),
            clip_fraction_low=_masked_mean((ratio < 1.0 - cfg.eps_low) & (token_advantages < 0), mask),
            clip_fraction_high=_masked_mean((ratio > 1.0 + cfg.eps_high) & (token_advantages > 0), mask),
            approx_kl=_masked_mean(torch.exp(token_log_ratio) - 1.0 - token_log_ratio, mask),
            ratio_mean=_masked_mean(ratio, mask),
            ratio_max=float(ratio[on_loss].max()) if bool(on_loss.any()) else 1.0,
            num_tokens=float(loss_mask.to(torch.float64).sum()),
            entropy=None if entropy is None else _masked_mean(entropy, mask),
            kl_ref=None if kl_per_token is None else _masked_mean(kl_per_token, mask),
            mismatch=_masked_mean(mismatch_log.abs(), mask),
            tis_weight_mean=None if tis_weight is None else _masked_mean(tis_weight, mask),
            tis_clip_fraction=None if tis_raw is None else _masked_mean(tis_raw > cfg.tis_cap, mask),
        )
    return loss, stats


def _aggregate(per_token: torch.Tensor, mask: torch.Tensor, cfg: ObjectiveConfig) -> torch.Tensor:
    """The numerator of the aggregation; the caller divides by the global denominator."""
    masked = per_token * mask
    if cfg.aggregation == "seq-mean-token-mean":
        tokens = mask.sum(dim=-1)
        # A sequence without loss tokens adds 0 (its sum is 0; the clamp only avoids 0/0).
        return (masked.sum(dim=-1) / tokens.clamp_min(torch.finfo(mask.dtype).tiny)).sum()
    # token-mean and Dr.GRPO's seq-mean-token-sum-norm both sum every token; they differ in the denominator.
    return masked.sum()


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mask-weighted mean of a statistic, summed in fp64 so large token counts stay exact."""
    mask = mask.to(torch.float64)
    total = mask.sum()
    if total <= 0:
        return 0.0
    on_loss = torch.where(mask > 0, values.to(torch.float64), torch.zeros_like(mask))  # padding may hold NaN
    return float((on_loss * mask).sum() / total)
