"""The KL term to the frozen reference, docs/method.md §Objective, against numbers worked out by hand:
the estimators k1, k2, k3 per token, and loss = pg + kl_coef · mean KL on a 1 × 3 batch."""

from __future__ import annotations

import pytest
import torch

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.algo.objective import clipped_policy_loss, kl_estimate

# log π_θ and log π_ref of two sampled tokens; log π_ref/π_θ = [-0.5, 1.0].
LOGPROBS = torch.tensor([-1.0, -2.0], dtype=torch.float64)
REF = torch.tensor([-1.5, -1.0], dtype=torch.float64)


@pytest.mark.parametrize(
    ("estimator", "expected"),
    [
        ("k1", [0.5, -1.0]),  # log π_θ − log π_ref
        ("k2", [0.125, 0.5]),  # ½ (log π_ref − log π_θ)²: ½ · 0.25, ½ · 1
        ("k3", [0.10653065971263342, 0.7182818284590451]),  # e^r − 1 − r at r = −0.5: 0.606531 − 0.5; at 1: e − 2
    ],
)
def test_kl_estimators_on_hand_computed_values(estimator, expected):
    got = kl_estimate(LOGPROBS, REF, estimator, clamp=20.0)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)


def test_the_loss_is_the_policy_gradient_loss_plus_kl_coef_times_the_mean_kl():
    """One sequence of 3 loss tokens, A = 0.5, ρ = e^{0.1}, e^{−0.1}, 1 (inside [0.8, 1.28]: unclipped):
    pg = −0.5 · (1.105171 + 0.904837 + 1) / 3 = −0.501668; k3 per token (log π_ref/π_θ = −0.5, 1, 0) =
    0.106531, 0.718282, 0, mean 0.274937; loss = −0.501668 + 0.1 · 0.274937 = −0.474174."""
    logprobs = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64)
    old = torch.tensor([[-1.1, -1.9, -0.5]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0, -0.5]], dtype=torch.float64)
    mask = torch.ones(1, 3)
    cfg = ObjectiveConfig(kl_coef=0.1, kl_estimator="k3")
    loss, stats = clipped_policy_loss(logprobs, old, torch.tensor([0.5]), mask, cfg, ref_logprobs=ref)
    assert float(loss) == pytest.approx(-0.4741743064128786, abs=1e-9)
    assert stats.pg_loss == pytest.approx(-0.5016680560186012, abs=1e-9)
    assert stats.kl_ref == pytest.approx(0.27493749605722617, abs=1e-9)
    assert stats.kl_loss == pytest.approx(0.1 * 0.27493749605722617, abs=1e-9)


def test_a_sample_with_advantage_zero_still_gets_the_kl_gradient():
    """A = 0: the policy-gradient part is 0, the loss is kl_coef · mean k3, and d/d log π_θ of k3 is
    1 − π_ref/π_θ: 0.1 / 3 · (1 − e^{−0.5}, 1 − e, 1 − 1) = (0.013116, −0.057276, 0). Why the learner trains
    on such samples when kl_coef > 0 (trainer.accumulate)."""
    logprobs = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -0.5]], dtype=torch.float64)
    cfg = ObjectiveConfig(kl_coef=0.1)
    loss, stats = clipped_policy_loss(
        logprobs, logprobs.detach(), torch.tensor([0.0]), torch.ones(1, 3), cfg, ref_logprobs=ref
    )
    loss.backward()
    assert stats.pg_loss == 0.0
    expected = torch.tensor([[0.0131156447, -0.0572760609, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(logprobs.grad, expected, rtol=0, atol=1e-9)
