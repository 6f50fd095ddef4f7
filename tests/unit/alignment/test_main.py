"""The main aligner's pure math (alignment/main.py), docs/method.md §Rewards and §Group-relative
advantages: B·K samples, R_M = α1·r_format + α2·r_correct if M's format is valid else 0, A_M per query
over the counted rollouts (failed or missing ones: weight 0, out of the group). Expected numbers are
worked out by hand in the comments, never by calling the code under test."""

import math

import numpy as np
import pytest

from mgrpo_actors.algo.config import AlgoConfig
from mgrpo_actors.alignment.batch_rows import batch_id
from mgrpo_actors.alignment.main import build_main_batch as _build_main_batch
from protocols import SAMPLE_KINDS, StepPlan, Trajectory
from tests.unit.alignment.checked import checked

CFG = AlgoConfig()  # α1 = 0.1, α2 = 0.9, population std, eps 1e-6


def build_main_batch(plan, trajectories, cfg):  # noqa: ANN001, ANN201
    """The main aligner's batch, which the learner's checks must pass."""
    batch, metrics = _build_main_batch(plan, trajectories, cfg)
    return checked(batch, plan, cfg), metrics


def plan(query_ids=("q1",), k=3, step=4):
    return StepPlan(
        run_id="run", step=step, query_ids=list(query_ids), num_rollouts=k, main_version=0, sub_versions={"sub": 0}
    )


def traj(query, k, format_ok=True, r_correct=0.0, n_tokens=3, failed=False, attempt="att", version=5):
    """M's trajectory of rollout k: tokens 100k+q.., the last two generated (loss 1)."""
    base = 100 * k
    tokens = np.arange(base, base + n_tokens, dtype=np.int32)
    mask = np.zeros(n_tokens, np.uint8)
    mask[1:] = 1
    logprobs = np.where(mask == 1, -0.5, 0.0).astype(np.float32)
    if failed:
        tokens, mask, logprobs = np.zeros(0, np.int32), np.zeros(0, np.uint8), np.zeros(0, np.float32)
    return Trajectory(
        run_id="run",
        side="main",
        step=4,
        query_id=query,
        rollout_index=k,
        call_id="",
        policy_version=-1 if failed else version,
        token_ids=tokens,
        loss_mask=mask,
        logprobs=logprobs,
        format_ok=format_ok and not failed,
        attempt=attempt,
        temperature=0.7,
        top_p=0.9,
        top_k=20,
        failed=failed,
        r_format=float(format_ok and not failed),
        r_correct=r_correct,
    )


# The hand case: (format_ok, r_correct) = (T,1), (T,0), (F,1)
#   R_M = 0.1·1 + 0.9·1 = 1.0 ; 0.1·1 + 0.9·0 = 0.1 ; invalid format → 0 (not 0.9: the whole reward is 0)
#   mean = (1.0 + 0.1 + 0) / 3 = 1.1/3 = 0.3666…
#   deviations: 1.0 − 0.3667 = 0.6333 ; 0.1 − 0.3667 = −0.2667 ; 0 − 0.3667 = −0.3667
#   population var = (0.633333² + 0.266667² + 0.366667²) / 3 = (0.401111 + 0.071111 + 0.134444) / 3 = 0.202222
#   std = √0.202222 = 0.449691 → A = 1.40837, −0.59300, −0.81537
HAND_REWARDS = [1.0, 0.1, 0.0]
HAND_STD = math.sqrt((0.4011111111 + 0.0711111111 + 0.1344444444) / 3)
HAND_ADVANTAGES = [0.6333333333 / HAND_STD, -0.2666666667 / HAND_STD, -0.3666666667 / HAND_STD]


def hand_trajectories(query="q1"):
    return {
        (query, 0): traj(query, 0, True, 1.0),
        (query, 1): traj(query, 1, True, 0.0),
        (query, 2): traj(query, 2, False, 1.0),
    }


def test_rewards_and_advantages_by_hand():
    batch, metrics = build_main_batch(plan(), hand_trajectories(), CFG)
    assert HAND_ADVANTAGES == pytest.approx([1.40837, -0.59300, -0.81537], abs=1e-5)  # the comment's numbers
    np.testing.assert_allclose(batch.rewards, HAND_REWARDS, atol=1e-6)
    np.testing.assert_allclose(batch.advantages, HAND_ADVANTAGES, atol=1e-5)
    assert batch.advantages.sum() == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_array_equal(batch.weights, [1, 1, 1])  # invalid format still trains (with its low reward)
    assert [SAMPLE_KINDS[i] for i in batch.kinds] == ["original"] * 3
    assert batch.sample_ids == ["q1/att/r0", "q1/att/r1", "q1/att/r2"]
    assert (batch.run_id, batch.side, batch.step, batch.batch_id, batch.d) == ("run", "main", 4, "run-main-step4", 0)
    assert batch_id("run", "main", 4) == "run-main-step4"
    assert metrics["reward_mean"] == pytest.approx(1.1 / 3)
    assert metrics["r_correct_mean"] == pytest.approx(2 / 3)
    assert metrics["format_ok_rate"] == pytest.approx(2 / 3)
    assert metrics["reward_std"] == pytest.approx(HAND_STD)
    assert (metrics["samples"], metrics["failed"], metrics["missing"], metrics["tokens"]) == (3, 0, 0, 6)


def test_tokens_concatenated_in_rollout_order():
    batch, _ = build_main_batch(plan(), hand_trajectories(), CFG)
    np.testing.assert_array_equal(batch.lengths, [3, 3, 3])
    np.testing.assert_array_equal(batch.token_ids, [0, 1, 2, 100, 101, 102, 200, 201, 202])
    np.testing.assert_array_equal(batch.loss_mask, [0, 1, 1] * 3)
    np.testing.assert_array_equal(batch.logprobs, [0, -0.5, -0.5] * 3)
    np.testing.assert_array_equal(batch.policy_versions, [5, 5, 5])
    np.testing.assert_allclose(batch.temperatures, [0.7] * 3)
    np.testing.assert_allclose(batch.top_ps, [0.9] * 3)
    np.testing.assert_array_equal(batch.top_ks, [20] * 3)
    assert (
        batch.token_ids.dtype == np.int32 and batch.loss_mask.dtype == np.uint8 and batch.logprobs.dtype == np.float32
    )


def test_failed_and_missing_rollouts_are_left_out_of_the_group():
    # K = 5: the hand case plus rollout 3 failed (its judge said r_correct = 1, which must not count) and
    # rollout 4 never arrived. The group is still the three counted rollouts: same advantages as by hand.
    trajectories = hand_trajectories() | {("q1", 3): traj("q1", 3, True, 1.0, failed=True, attempt="att2")}
    batch, metrics = build_main_batch(plan(k=5), trajectories, CFG)
    assert len(batch.sample_ids) == 5  # B·K always
    np.testing.assert_allclose(batch.advantages, HAND_ADVANTAGES + [0, 0], atol=1e-5)
    np.testing.assert_allclose(batch.rewards, HAND_REWARDS + [0, 0], atol=1e-6)
    np.testing.assert_array_equal(batch.weights, [1, 1, 1, 0, 0])
    assert [SAMPLE_KINDS[i] for i in batch.kinds] == ["original"] * 3 + ["failed"] * 2
    assert batch.sample_ids[3:] == ["q1/att2/r3", "q1/-/r4"]
    # Placeholders: one masked token each, policy version -1.
    np.testing.assert_array_equal(batch.lengths, [3, 3, 3, 1, 1])
    np.testing.assert_array_equal(batch.loss_mask[-2:], [0, 0])
    np.testing.assert_array_equal(batch.policy_versions[-2:], [-1, -1])
    assert (metrics["samples"], metrics["failed"], metrics["missing"]) == (5, 2, 1)
    assert metrics["reward_mean"] == pytest.approx(1.1 / 3)  # over counted rollouts only


def test_groups_are_per_query():
    # q1: the hand case. q2: (T,1), (T,1), (T,0) → R_M = 1, 1, 0.1; mean = 2.1/3 = 0.7;
    #   deviations 0.3, 0.3, −0.6; var = (0.09 + 0.09 + 0.36)/3 = 0.18; std = √0.18 = 0.424264
    #   A = 0.707107, 0.707107, −1.414214 (q1's rewards do not enter).
    trajectories = hand_trajectories("q1") | {
        ("q2", 0): traj("q2", 0, True, 1.0),
        ("q2", 1): traj("q2", 1, True, 1.0),
        ("q2", 2): traj("q2", 2, True, 0.0),
    }
    batch, _ = build_main_batch(plan(("q1", "q2")), trajectories, CFG)
    std = math.sqrt(0.18)
    np.testing.assert_allclose(batch.advantages, HAND_ADVANTAGES + [0.3 / std, 0.3 / std, -0.6 / std], atol=1e-5)
    assert batch.sample_ids[3:] == ["q2/att/r0", "q2/att/r1", "q2/att/r2"]


def test_partial_credit_and_degenerate_groups():
    # r_correct = 0.5 (a judge's partial score): R_M = 0.1 + 0.9·0.5 = 0.55. Group (0.55, 0.55, 0.55):
    # std = 0 ≤ eps → no signal, advantages 0 (eps is never added to std).
    trajectories = {("q1", i): traj("q1", i, True, 0.5) for i in range(3)}
    batch, _ = build_main_batch(plan(), trajectories, CFG)
    np.testing.assert_allclose(batch.rewards, [0.55] * 3, atol=1e-6)
    np.testing.assert_array_equal(batch.advantages, [0, 0, 0])
    # Only one counted rollout left: a group of one carries no relative signal → 0, still weight 1.
    one = {("q1", 0): traj("q1", 0, True, 1.0)}
    batch, metrics = build_main_batch(plan(), one, CFG)
    np.testing.assert_array_equal(batch.advantages, [0, 0, 0])
    np.testing.assert_array_equal(batch.weights, [1, 0, 0])
    assert metrics["missing"] == 2


def test_unbiased_std_is_configuration():
    # Same hand case, unbiased std: var = 0.606667 / (3 − 1) = 0.303333, std = 0.550757 → A = 0.6333/0.5508 …
    cfg = AlgoConfig.from_dict({"advantages": {"std": "unbiased"}})
    batch, _ = build_main_batch(plan(), hand_trajectories(), cfg)
    std = math.sqrt((0.4011111111 + 0.0711111111 + 0.1344444444) / 2)
    np.testing.assert_allclose(
        batch.advantages, [0.6333333333 / std, -0.2666666667 / std, -0.3666666667 / std], atol=1e-5
    )


def test_reward_weights_come_from_config():
    # α1 = 0.5, α2 = 0.5: (T,1) → 1.0, (T,0) → 0.5, (F,1) → 0.
    cfg = AlgoConfig.from_dict({"rewards": {"alpha_format": 0.5, "alpha_correct": 0.5}})
    batch, _ = build_main_batch(plan(), hand_trajectories(), cfg)
    np.testing.assert_allclose(batch.rewards, [1.0, 0.5, 0.0], atol=1e-6)


def test_same_input_same_batch():
    a, ma = build_main_batch(plan(), hand_trajectories(), CFG)
    b, mb = build_main_batch(plan(), hand_trajectories(), CFG)
    assert a == b and ma == mb
