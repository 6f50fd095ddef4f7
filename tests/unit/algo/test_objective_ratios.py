"""GSPO's sequence-mean ratio and fp32 loss computation, docs/method.md §Objective. Expected values are by hand."""

import pytest
import torch

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.algo.objective import _ratio_and_advantages, clipped_policy_loss

E_POW_0_2 = 1.2214027581601699  # e^0.2
E_POW_MINUS_0_4 = 0.6703200460356393  # e^-0.4


def _gspo_batch():
    """Three sequences: mean log-ratio 0.2 (A = 1), mean -0.4 (A = -1), and a placeholder (mask all 0)."""
    old = torch.zeros(3, 3, dtype=torch.float64)
    new = torch.tensor([[0.1, 0.3, 9.0], [-0.6, -0.2, -0.4], [3.0, -3.0, 7.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    return new.requires_grad_(), old, torch.tensor([1.0, -1.0, 0.5]), mask


def test_sequence_mean_ratio_known_values_token_mean():
    new, old, advantages, mask = _gspo_batch()
    loss, stats = clipped_policy_loss(new, old, advantages, mask, ObjectiveConfig(ratio="sequence-mean"))
    # Row 0: ρ = e^0.2 = 1.2214 inside [0.8, 1.28], term −1.2214 on each of 2 tokens.
    # Row 1: ρ = e^−0.4 = 0.6703 < 0.8 with A = −1: clipped term −(0.8·−1) = +0.8 on each of 3 tokens.
    # Row 2: no loss tokens, adds nothing. token-mean over 5 tokens: (−2·1.2214 + 3·0.8) / 5.
    assert loss.item() == pytest.approx((-2 * E_POW_0_2 + 3 * 0.8) / 5)
    assert stats.num_tokens == 5.0
    assert stats.clip_fraction == pytest.approx(3 / 5) and stats.clip_fraction_low == pytest.approx(3 / 5)
    assert stats.ratio_mean == pytest.approx((2 * E_POW_0_2 + 3 * E_POW_MINUS_0_4) / 5)
    assert stats.ratio_max == pytest.approx(E_POW_0_2)
    loss.backward()
    # d log ρ0 / d log π_t = 1/2 on row 0's two tokens, and its term appears on both, over 5 tokens:
    # −2·(ρ0/2)/5 = −ρ0/5 per token, as token-level GRPO's token-mean would give. Clipped row 1: 0.
    expected = torch.tensor([[-E_POW_0_2 / 5, -E_POW_0_2 / 5, 0.0], [0.0] * 3, [0.0] * 3], dtype=torch.float64)
    torch.testing.assert_close(new.grad, expected)


def test_sequence_mean_ratio_with_seq_mean_token_mean_is_gspo():
    new, old, advantages, mask = _gspo_batch()
    cfg = ObjectiveConfig(ratio="sequence-mean", aggregation="seq-mean-token-mean")
    loss, _ = clipped_policy_loss(new, old, advantages, mask, cfg)
    # GSPO: mean over the 2 sequences with loss tokens of min(ρ·A, clip(ρ)·A), negated: (−1.2214 + 0.8) / 2.
    assert loss.item() == pytest.approx((-E_POW_0_2 + 0.8) / 2)
    loss.backward()
    # −(1/2 sequences)·A·ρ0·(1/2 tokens) on row 0's tokens.
    assert new.grad[0, :2].tolist() == pytest.approx([-E_POW_0_2 / 4] * 2)
    assert new.grad[1:].abs().sum().item() == 0.0


def test_a_sequence_without_loss_tokens_has_ratio_one():
    token_log_ratio = torch.tensor([[0.1, 0.3], [0.0, 0.0]], dtype=torch.float64)
    on_loss = torch.tensor([[True, True], [False, False]])
    ratio, advantages = _ratio_and_advantages(
        token_log_ratio, on_loss, torch.tensor([1.0, 2.0], dtype=torch.float64), ObjectiveConfig(ratio="sequence-mean")
    )
    torch.testing.assert_close(ratio, torch.tensor([[E_POW_0_2] * 2, [1.0, 1.0]], dtype=torch.float64))
    assert advantages.tolist() == [[1.0, 1.0], [2.0, 2.0]]


def _bf16_batch():
    """1,001 loss tokens (1,000 in row 0, 1 in row 1); bf16 cannot hold 1001 (it rounds to 1000)."""
    g = torch.Generator().manual_seed(0)
    old = (-3 * torch.rand(2, 1000, generator=g)).to(torch.bfloat16)
    new = (old.float() + 0.05 * torch.randn(2, 1000, generator=g)).to(torch.bfloat16)
    mask = torch.zeros(2, 1000)
    mask[0] = 1.0
    mask[1, 0] = 1.0
    return new, old, mask


def test_bf16_logprobs_count_every_token_and_the_loss_is_fp32():
    assert float(torch.tensor(1001.0).to(torch.bfloat16)) == 1000.0  # the old bug's cause
    _, old, mask = _bf16_batch()
    logprobs = old.clone().requires_grad_()  # ρ = 1 exactly
    # Only row 1's token has A = 1: token-mean loss = −1/1001 (in bf16 it would be −1/1000).
    loss, stats = clipped_policy_loss(logprobs, old, torch.tensor([0.0, 1.0]), mask, ObjectiveConfig())
    assert stats.num_tokens == 1001.0
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(-1 / 1001, rel=1e-6)
    loss.backward()
    assert logprobs.grad.dtype == torch.bfloat16  # the gradient still reaches the bf16 log-probs
    assert logprobs.grad[1, 0].item() == pytest.approx(-1 / 1001, rel=1e-2)  # bf16 keeps 3 digits


@pytest.mark.parametrize("ratio", ["token", "sequence-mean"])
def test_bf16_loss_equals_the_fp32_loss(ratio):
    new, old, mask = _bf16_batch()
    cfg = ObjectiveConfig(ratio=ratio)
    advantages = torch.tensor([0.7, -1.3])
    loss_bf16, stats_bf16 = clipped_policy_loss(new, old, advantages, mask, cfg)
    loss_fp32, stats_fp32 = clipped_policy_loss(new.float(), old.float(), advantages, mask, cfg)
    assert loss_bf16.item() == pytest.approx(loss_fp32.item(), rel=1e-6)
    assert stats_bf16.num_tokens == stats_fp32.num_tokens == 1001.0
