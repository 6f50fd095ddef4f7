"""Engine/learner mismatch (docs/method.md §Objective [ours]): `recompute_old_logprobs` takes the learner's
own pre-step logprobs as π_old, `tis_cap` weighs each token's policy-gradient loss by
min(π_learner_old / π_engine, C), and the mismatch is reported; hand-computed on two tokens.

The batch: one sequence, A = 1, token-mean over its 2 loss tokens (a third is padding). The learner's
logprobs are (−1, −2), the engine's (−1.5, −1): log π_learner/π_engine = (0.5, −1).
"""

import math

import pytest
import torch

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.algo.objective import clipped_policy_loss

E_HALF, E_MINUS_1 = math.exp(0.5), math.exp(-1.0)  # 1.6487, 0.3679


def _loss(cfg: ObjectiveConfig, learner_old=None):  # noqa: ANN001, ANN202
    logprobs = torch.tensor([[-1.0, -2.0, 5.0]], requires_grad=True)  # the last one is padding (garbage)
    engine = torch.tensor([[-1.5, -1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, stats = clipped_policy_loss(
        logprobs, engine, torch.tensor([1.0]), mask, cfg, learner_old_logprobs=learner_old
    )
    loss.backward()
    return float(loss.detach()), logprobs.grad[0].tolist(), stats


def test_without_recompute_the_ratio_is_against_the_engines_logprobs():
    loss, grad, stats = _loss(ObjectiveConfig())
    # ρ = (e^0.5, e^-1): token 0 clipped at 1 + 0.28 (no gradient), token 1 not
    assert loss == pytest.approx(-(1.28 + E_MINUS_1) / 2)
    assert grad == pytest.approx([0.0, -E_MINUS_1 / 2, 0.0])
    assert stats.mismatch == pytest.approx((0.5 + 1.0) / 2) and stats.clip_fraction == pytest.approx(0.5)
    assert stats.tis_weight_mean is None and stats.tis_clip_fraction is None


def test_recompute_takes_the_learners_own_logprobs_as_pi_old():
    loss, grad, stats = _loss(ObjectiveConfig(recompute_old_logprobs=True))
    # π_old = this forward's logprobs (detached): ρ = 1, so the loss is −A and each token's gradient −A/2
    assert loss == pytest.approx(-1.0)
    assert grad == pytest.approx([-0.5, -0.5, 0.0])
    assert stats.ratio_mean == pytest.approx(1.0) and stats.clip_fraction == 0.0 and stats.approx_kl == 0.0
    assert stats.mismatch == pytest.approx(0.75)  # still against the engine


def test_recompute_with_given_pre_step_logprobs():
    loss, grad, stats = _loss(ObjectiveConfig(recompute_old_logprobs=True), torch.tensor([[-1.1, -2.0, 0.0]]))
    # ρ = (e^0.1, 1), both inside the clip range; the mismatch is the given π_learner_old's: (0.4, 1)
    assert loss == pytest.approx(-(math.exp(0.1) + 1.0) / 2)
    assert grad == pytest.approx([-math.exp(0.1) / 2, -0.5, 0.0])
    assert stats.mismatch == pytest.approx((0.4 + 1.0) / 2)


def test_truncated_importance_sampling_weighs_each_tokens_loss():
    loss, grad, stats = _loss(ObjectiveConfig(recompute_old_logprobs=True, tis_cap=1.5))
    # w = (min(e^0.5, 1.5), min(e^-1, 1.5)) = (1.5, 0.3679), detached; ρ = 1
    assert loss == pytest.approx(-(1.5 + E_MINUS_1) / 2)
    assert grad == pytest.approx([-1.5 / 2, -E_MINUS_1 / 2, 0.0])
    assert stats.tis_weight_mean == pytest.approx((1.5 + E_MINUS_1) / 2)
    assert stats.tis_clip_fraction == pytest.approx(0.5)


def test_truncated_importance_sampling_below_the_cap_is_the_plain_ratio():
    _, grad, stats = _loss(ObjectiveConfig(recompute_old_logprobs=True, tis_cap=10.0))
    assert grad == pytest.approx([-E_HALF / 2, -E_MINUS_1 / 2, 0.0])
    assert stats.tis_weight_mean == pytest.approx((E_HALF + E_MINUS_1) / 2) and stats.tis_clip_fraction == 0.0


@pytest.mark.parametrize("cap", [0.0, -1.0, float("inf"), float("nan"), True])
def test_a_bad_tis_cap_is_refused(cap):
    with pytest.raises(ValueError, match="objective.tis_cap must be a finite number"):
        ObjectiveConfig(recompute_old_logprobs=True, tis_cap=cap)


def test_recompute_must_be_a_bool():
    with pytest.raises(ValueError, match="objective.recompute_old_logprobs"):
        ObjectiveConfig(recompute_old_logprobs="yes")


def test_tis_weighs_the_clipped_loss_per_token_against_given_pre_step_logprobs():
    """Hand case, per-token advantages, π_old = the given pre-step logprobs (≠ this forward's):
    token 0: ρ = e^(−1 − (−1.5)) = e^0.5, A = 1, clipped at 1.28 (no gradient); w = e^(−1.5 − (−2)) = e^0.5.
    token 1: ρ = e^(−2 − (−1.9)) = e^−0.1, A = −1, inside the clip range; w = e^(−1.9 − (−1.8)) = e^−0.1.
    Token-mean over 2: loss = (−1.28·e^0.5 + e^−0.1·e^−0.1) / 2, d loss / d logprob_1 = e^−0.1·e^−0.1 / 2."""
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, stats = clipped_policy_loss(
        logprobs,
        torch.tensor([[-2.0, -1.8]]),
        torch.tensor([[1.0, -1.0]]),
        torch.ones(1, 2),
        ObjectiveConfig(recompute_old_logprobs=True, tis_cap=10.0),
        learner_old_logprobs=torch.tensor([[-1.5, -1.9]]),
    )
    loss.backward()
    e = math.exp(-0.1)
    assert float(loss.detach()) == pytest.approx((-1.28 * E_HALF + e * e) / 2, rel=1e-6)
    assert logprobs.grad[0].tolist() == pytest.approx([0.0, e * e / 2], rel=1e-6)
    assert stats.mismatch == pytest.approx((0.5 + 0.1) / 2, rel=1e-6)
    assert stats.tis_weight_mean == pytest.approx((E_HALF + e) / 2, rel=1e-6) and stats.tis_clip_fraction == 0.0
    assert stats.clip_fraction == pytest.approx(0.5)


def test_tis_with_a_weighted_mask_and_micro_batches_over_the_global_denominator():
    """Two sequences, loss mask weights (1, 0.5 | 1, 0), engine logprobs NaN on the padding, recompute + TIS at
    C = 1.5, seq-mean-token-mean over the whole batch (denominator 2 sequences), A = (1, −2). Hand values:
    seq 0: log π_learner/π_engine = (0.5, −1): w = (1.5, e^−1); its token mean of −A·w under weights (1, 0.5)
    is −(1.5 + 0.5·e^−1) / 1.5. seq 1: one loss token, log-ratio 0.2: w = e^0.2, loss 2·e^0.2.
    Computed as two micro-batches with global_denominator=2 they add up to the whole batch's loss and
    gradient; the statistics are mask-weighted means (mismatch (0.5 + 0.5 + 0.2) / 2.5)."""
    cfg = ObjectiveConfig(recompute_old_logprobs=True, tis_cap=1.5, aggregation="seq-mean-token-mean")
    learner = torch.tensor([[-1.0, -2.0, 7.0], [-0.5, 3.0, 3.0]])
    engine = torch.tensor([[-1.5, -1.0, float("nan")], [-0.7, float("nan"), float("nan")]])
    mask = torch.tensor([[1.0, 0.5, 0.0], [1.0, 0.0, 0.0]])
    advantages = torch.tensor([1.0, -2.0])
    w = (1.5, E_MINUS_1, math.exp(0.2))
    seq0, seq1 = -(w[0] + 0.5 * w[1]) / 1.5, 2.0 * w[2]
    expected_loss = (seq0 + seq1) / 2
    expected_grad = [[-w[0] / 1.5 / 2, -0.5 * w[1] / 1.5 / 2, 0.0], [2.0 * w[2] / 2, 0.0, 0.0]]

    whole = learner.clone().requires_grad_()
    loss, stats = clipped_policy_loss(whole, engine, advantages, mask, cfg)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(expected_loss, rel=1e-6)
    assert whole.grad.tolist() == [pytest.approx(row, rel=1e-6) for row in expected_grad]
    assert stats.mismatch == pytest.approx((0.5 + 0.5 * 1.0 + 0.2) / 2.5, rel=1e-6)
    assert stats.tis_weight_mean == pytest.approx((w[0] + 0.5 * w[1] + w[2]) / 2.5, rel=1e-6)
    assert stats.tis_clip_fraction == pytest.approx(1.0 / 2.5)

    parts, total = learner.clone().requires_grad_(), 0.0
    weighted = dict.fromkeys(("mismatch", "tis_weight_mean", "tis_clip_fraction"), 0.0)
    for row in (0, 1):
        part, part_stats = clipped_policy_loss(
            parts[row : row + 1],
            engine[row : row + 1],
            advantages[row : row + 1],
            mask[row : row + 1],
            cfg,
            global_denominator=2.0,
        )
        part.backward()
        total += float(part.detach())
        for name in weighted:  # token-weighted, as the trainer adds them up
            weighted[name] += getattr(part_stats, name) * part_stats.num_tokens
    assert total == pytest.approx(expected_loss, rel=1e-6)
    assert parts.grad.tolist() == [pytest.approx(row, rel=1e-6) for row in expected_grad]
    for name, value in weighted.items():
        assert value / 2.5 == pytest.approx(getattr(stats, name), rel=1e-6), name


# A token outside the learner's top-k/top-p support (learner logprob −inf, the engine's finite: a bf16 or vLLM engine at
# the top-p boundary) once made the log-ratio −inf − (−inf) = NaN and the mismatch inf.
def test_a_token_outside_the_learners_support_leaves_loss_and_mismatch_finite():
    logprobs = torch.tensor([[float("-inf"), -1.0]], requires_grad=True)
    loss, stats = clipped_policy_loss(
        logprobs,
        torch.tensor([[-6.0, -0.9]]),
        torch.tensor([1.0]),
        torch.ones(1, 2),
        ObjectiveConfig(recompute_old_logprobs=True, tis_cap=2.0),
    )
    loss.backward()
    assert math.isfinite(float(loss.detach())) and math.isfinite(stats.mismatch)
    assert bool(torch.isfinite(logprobs.grad).all())


def test_tis_without_recompute_is_refused_since_it_would_correct_twice():
    with pytest.raises(ValueError, match="tis_cap needs objective.recompute_old_logprobs"):
        ObjectiveConfig(tis_cap=2.0)
