"""The clipped objective, docs/method.md §Objective."""

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.algo.objective import clipped_policy_loss, kl_estimate, loss_denominator

AGGREGATIONS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
RATIOS = ["token", "sequence", "sequence-mean"]
# ratio: sequence is only valid with seq-mean-token-mean (docs/method.md §Objective).
COMBOS = [(a, r) for a, r in itertools.product(AGGREGATIONS, RATIOS) if r != "sequence" or a == "seq-mean-token-mean"]


def _cfg(aggregation=None, ratio="token", **overrides):
    if aggregation is None:
        aggregation = "seq-mean-token-mean" if ratio == "sequence" else "token-mean"
    return ObjectiveConfig(aggregation=aggregation, ratio=ratio, max_response_tokens=16, **overrides)


def _batch(n=6, t=7, seed=0, spread=0.1):
    """Random log-probs near the old ones, ragged masks, one all-masked row (an alignment placeholder)."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, t, generator=g, dtype=torch.float64) * 3
    new = old + spread * torch.randn(n, t, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(torch.float64)
    mask[-1] = 0.0
    advantages = torch.randn(n, generator=g, dtype=torch.float64)
    ref = old + 0.05 * torch.randn(n, t, generator=g, dtype=torch.float64)
    return new, old, advantages, mask, ref


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 5), t=st.integers(1, 6), seed=st.integers(0, 1000), combo=st.sampled_from(COMBOS))
def test_no_clipping_and_unit_ratio_when_new_equals_old(n, t, seed, combo):
    aggregation, ratio = combo
    _, old, advantages, mask, _ = _batch(n, t, seed)
    mask[0, 0] = 1.0  # at least one loss token
    loss, stats = clipped_policy_loss(old.clone(), old, advantages, mask, _cfg(aggregation, ratio))
    assert stats.clip_fraction == 0.0 and stats.clip_fraction_low == 0.0 and stats.clip_fraction_high == 0.0
    assert stats.ratio_mean == pytest.approx(1.0) and stats.ratio_max == pytest.approx(1.0)
    assert stats.approx_kl == pytest.approx(0.0, abs=1e-12)
    if aggregation == "token-mean":  # ρ = 1: the loss is minus the token-mean advantage
        expected = -(advantages[:, None] * mask).sum() / mask.sum()
        assert loss.item() == pytest.approx(float(expected))


def test_clipping_known_values():
    cfg = _cfg()
    old = torch.zeros(2, 1, dtype=torch.float64)
    new = torch.log(torch.tensor([[2.0], [0.5]], dtype=torch.float64)).requires_grad_()
    loss, stats = clipped_policy_loss(new, old, torch.tensor([1.0, -1.0]), torch.ones(2, 1), cfg)
    # ρ = 2, A = 1: min(2, 1.28) = 1.28. ρ = 0.5, A = -1: min(-0.5, -0.8) = -0.8. Loss = -(1.28 - 0.8) / 2.
    assert loss.item() == pytest.approx(-(1.28 - 0.8) / 2)
    assert stats.clip_fraction == 1.0 and stats.clip_fraction_low == 0.5 and stats.clip_fraction_high == 0.5
    assert stats.ratio_max == pytest.approx(2.0)
    loss.backward()
    assert torch.all(new.grad == 0.0)  # clipped tokens pass no gradient


@pytest.mark.parametrize(("aggregation", "ratio"), COMBOS)
def test_gradient_matches_finite_differences(aggregation, ratio):
    new, old, advantages, mask, ref = _batch(n=4, t=5, seed=3)
    cfg = _cfg(aggregation, ratio, kl_coef=0.1)

    def loss_of(logprobs):
        return clipped_policy_loss(logprobs, old, advantages, mask, cfg, ref_logprobs=ref)[0]

    assert torch.autograd.gradcheck(loss_of, (new.clone().requires_grad_(),), eps=1e-6, atol=1e-7)


def test_gradient_inside_the_clip_range_is_the_policy_gradient():
    # Where no token is clipped, d loss / d logπ = −A·ρ·mask / (loss tokens) for token-mean.
    new, old, advantages, mask, _ = _batch(spread=0.01)
    logprobs = new.clone().requires_grad_()
    loss, stats = clipped_policy_loss(logprobs, old, advantages, mask, _cfg())
    loss.backward()
    assert stats.clip_fraction == 0.0
    expected = -advantages[:, None] * torch.exp(new - old) * mask / mask.sum()
    torch.testing.assert_close(logprobs.grad, expected)


@pytest.mark.parametrize(("aggregation", "ratio"), COMBOS)
def test_micro_batch_accumulation_equals_one_batch(aggregation, ratio):
    new, old, advantages, mask, ref = _batch(n=9, t=8, seed=5, spread=0.4)
    cfg = _cfg(aggregation, ratio, kl_coef=0.05)
    whole = new.clone().requires_grad_()
    loss, _ = clipped_policy_loss(whole, old, advantages, mask, cfg, ref_logprobs=ref)
    loss.backward()

    parts = new.clone().requires_grad_()
    denominator = loss_denominator(mask, cfg)
    total = 0.0
    for rows in (slice(0, 2), slice(2, 3), slice(3, 9)):
        micro_loss, _ = clipped_policy_loss(
            parts[rows],
            old[rows],
            advantages[rows],
            mask[rows],
            cfg,
            ref_logprobs=ref[rows],
            global_denominator=denominator,
        )
        micro_loss.backward()
        total += micro_loss.item()
    assert total == pytest.approx(loss.item(), abs=1e-6)
    torch.testing.assert_close(parts.grad, whole.grad, atol=1e-6, rtol=0)


def test_loss_denominators():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert loss_denominator(mask, _cfg("token-mean")) == 3.0
    assert loss_denominator(mask, _cfg("seq-mean-token-mean")) == 2.0  # the empty placeholder row does not count
    assert loss_denominator(mask, _cfg("seq-mean-token-sum-norm")) == 2.0 * 16


def test_sequence_ratio_is_the_product_over_loss_tokens():
    old = torch.zeros(1, 3, dtype=torch.float64)
    new = torch.tensor([[0.05, 0.05, 5.0]], dtype=torch.float64)  # the third token is masked out
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    _, stats = clipped_policy_loss(new, old, torch.tensor([1.0]), mask, _cfg(ratio="sequence"))
    assert stats.ratio_mean == pytest.approx(math.exp(0.1))


def test_log_ratio_is_clamped_and_padding_garbage_is_ignored():
    old = torch.tensor([[-200.0, -1.0, float("nan")]], dtype=torch.float64)
    new = torch.tensor([[0.0, -1.0, float("-inf")]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.0, -1.0, float("nan")]], dtype=torch.float64)
    entropy = torch.tensor([[1.0, 1.0, float("nan")]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # Clamped token log-ratios (20, 0): token and sequence reach e^20; sequence-mean their mean, e^10.
    for ratio, log_max in (("token", 20.0), ("sequence", 20.0), ("sequence-mean", 10.0)):
        loss, stats = clipped_policy_loss(
            new, old, torch.tensor([-1.0]), mask, _cfg(ratio=ratio, kl_coef=0.1), ref_logprobs=ref, entropy=entropy
        )
        loss.backward()
        assert math.isfinite(loss.item()) and stats.ratio_max == pytest.approx(math.exp(log_max))
        assert math.isfinite(stats.kl_ref) and stats.entropy == 1.0
        assert torch.isfinite(new.grad).all()
        new.grad = None


def test_a_token_outside_the_policys_nucleus_adds_no_kl_and_no_nan():
    # Token 2 is outside both the learner's and the reference's top-k (both −inf), token 3 outside the
    # learner's only: each adds 0 to the KL term, and loss and gradients stay finite.
    old = torch.tensor([[-1.0, -1.2, -3.0, -2.0]], dtype=torch.float64)
    new = torch.tensor([[-1.1, -1.0, float("-inf"), float("-inf")]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, float("-inf"), -2.5]], dtype=torch.float64)
    mask = torch.ones(1, 4)
    loss, stats = clipped_policy_loss(new, old, torch.tensor([1.0]), mask, _cfg(kl_coef=0.1), ref_logprobs=ref)
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(new.grad).all()
    log_r = torch.tensor([-0.4, 0.0], dtype=torch.float64)  # ref − new on the two usable tokens
    expected = float((torch.exp(log_r) - 1 - log_r).sum()) / 4  # token-mean over the 4 loss tokens
    assert stats.kl_ref == pytest.approx(expected)


def test_kl_estimators():
    logprobs = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64)
    ref = torch.tensor([-1.5, -1.0, -0.5], dtype=torch.float64)
    log_r = ref - logprobs
    torch.testing.assert_close(kl_estimate(logprobs, ref, "k1", 20.0), -log_r)
    torch.testing.assert_close(kl_estimate(logprobs, ref, "k2", 20.0), 0.5 * log_r**2)
    k3 = kl_estimate(logprobs, ref, "k3", 20.0)
    torch.testing.assert_close(k3, torch.exp(log_r) - 1 - log_r)
    assert torch.all(k3 >= 0) and k3[2] == 0.0


def test_kl_term_enters_the_loss_only_when_on():
    new, old, advantages, mask, ref = _batch()
    off, stats_off = clipped_policy_loss(new, old, advantages, mask, _cfg(), ref_logprobs=ref)
    on, stats_on = clipped_policy_loss(new, old, advantages, mask, _cfg(kl_coef=0.5), ref_logprobs=ref)
    assert stats_off.kl_loss == pytest.approx(0.0) and stats_off.kl_ref > 0.0  # still reported
    assert on.item() - off.item() == pytest.approx(0.5 * stats_on.kl_ref)


def test_entropy_statistic():
    new, old, advantages, mask, _ = _batch()
    entropy = torch.full_like(new, 2.0)
    entropy[mask == 0] = 99.0
    _, stats = clipped_policy_loss(new, old, advantages, mask, _cfg(), entropy=entropy)
    assert stats.entropy == pytest.approx(2.0)
    assert stats.as_dict()["num_tokens"] == float(mask.sum())


def test_token_level_advantages_are_accepted():
    new, old, advantages, mask, _ = _batch()
    per_sequence, _ = clipped_policy_loss(new, old, advantages, mask, _cfg())
    per_token, _ = clipped_policy_loss(new, old, advantages[:, None].expand_as(mask), mask, _cfg())
    assert per_token.item() == pytest.approx(per_sequence.item())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: {**b, "old_logprobs": b["old_logprobs"][:, :-1]}, "old_logprobs shape"),
        (lambda b: {**b, "loss_mask": b["loss_mask"][:-1]}, "loss_mask shape"),
        (lambda b: {**b, "advantages": b["advantages"][:-1]}, "advantages shape"),
        (lambda b: {**b, "advantages": b["advantages"] * float("nan")}, "NaN or inf"),
        (lambda b: {**b, "logprobs": b["logprobs"][0]}, "must be 2-D"),
        (lambda b: {**b, "cfg": _cfg(kl_coef=0.1)}, "needs ref_logprobs"),
        (
            lambda b: {**b, "cfg": _cfg(ratio="sequence"), "advantages": b["advantages"][:, None].repeat(1, 7)},
            "ratio: sequence needs one advantage per sequence",
        ),
        (
            lambda b: {**b, "cfg": _cfg(ratio="sequence-mean"), "advantages": b["advantages"][:, None].repeat(1, 7)},
            "ratio: sequence-mean needs one advantage per sequence",
        ),
        (lambda b: {**b, "global_denominator": 0.0}, "global_denominator is 0.0"),
    ],
)
def test_bad_input_is_a_clear_value_error(change, message):
    new, old, advantages, mask, _ = _batch()
    args = {"logprobs": new, "old_logprobs": old, "advantages": advantages, "loss_mask": mask, "cfg": _cfg()}
    with pytest.raises(ValueError, match=message):
        clipped_policy_loss(**change(args))
