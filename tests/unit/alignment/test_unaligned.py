"""The within-step ablation (alignment/unaligned.py, `algo.alignment.mode: none-per-step`): B·K·D slots filled
first-in-first-out from the step's counted sub trajectories, R_S as aligned, one advantage group per
query over its samples in the batch (docs/method.md §Group-relative advantages). Hand-worked numbers use the
aligned tests' case: R_S of att.r0.t0, att.r1.t0, att.r1.t1, att.r1.t2 = 1.0, 0.1, 0.6, 0.0."""

import math

import numpy as np
import pytest

from mgrpo_actors.algo.config import AlgoConfig
from mgrpo_actors.alignment.unaligned import build_unaligned_sub_batch, fifo_calls
from mgrpo_actors.rollout.config import RolloutConfig
from protocols import SAMPLE_KINDS
from tests.unit.alignment.checked import checked
from tests.unit.alignment.test_sub import QUESTION, hand_inputs, plan, stats, sub

ALGO = AlgoConfig.from_dict({"alignment": {"mode": "none-per-step"}})
QUESTIONS = {"q1": QUESTION}


def build(trajectories, st, d, k=2, query_ids=("q1",)):
    step = plan(k=k, query_ids=query_ids)
    batch, figures = build_unaligned_sub_batch(step, st, trajectories, d, ALGO, RolloutConfig(), QUESTIONS)
    return checked(batch, step, ALGO), figures


def test_every_call_fits_one_group_over_all_four():
    # D = 2: 4 slots, 4 calls. R = [1, .1, .6, 0]: mean .425; dev .575 −.325 .175 −.425;
    # var (.330625 + .105625 + .030625 + .180625)/4 = .161875.
    st, trajectories = hand_inputs()
    batch, figures = build(trajectories, st, d=2)
    std = math.sqrt(0.161875)
    np.testing.assert_allclose(batch.rewards, [1.0, 0.1, 0.6, 0.0])
    # stored as float32
    np.testing.assert_allclose(batch.advantages, np.array([0.575, -0.325, 0.175, -0.425]) / std, rtol=1e-6)
    assert [SAMPLE_KINDS[i] for i in batch.kinds] == ["original"] * 4
    assert figures["dropped"] == 0 and figures["placeholders"] == 0 and figures["samples"] == 4
    assert figures["dk_mean"] == 2.0 and figures["dk_max"] == 3.0  # d_k = 1 and 3, as aligned mode counts them


def test_the_first_to_arrive_take_the_slots_whatever_rollout_they_belong_to():
    # D = 1: 2 slots. Arrival order r1.t2, r1.t1, r0.t0, r1.t0: both slots go to rollout 1 (R 0 and .6:
    # mean .3, dev ∓.3, std .3 → −1, +1); rollout 0 gets none, two calls are dropped.
    st, trajectories = hand_inputs()
    arrived = {call: trajectories[call] for call in ("att.r1.t2", "att.r1.t1", "att.r0.t0", "att.r1.t0")}
    batch, figures = build(arrived, st, d=1)
    assert [s.split("/")[3] for s in batch.sample_ids] == ["att.r1.t2#0", "att.r1.t1#0"]
    np.testing.assert_allclose(batch.advantages, [-1.0, 1.0])
    assert figures["dropped"] == 2 and figures["original"] == 2
    # The metric covers every counted call, kept or dropped, as aligned mode's does: (1 + .1 + .6 + 0) / 4.
    assert figures["reward_mean"] == pytest.approx(0.425, rel=1e-9) and figures["calls"] == 4


def test_each_query_is_its_own_group_whatever_order_the_calls_arrive_in():
    # B = 2, K = 2, D = 1: 4 slots, calls of q1 and q2 interleaved. q1: r0.t0 R 1.0, r1.t1 R .6 (mean .8,
    # std .2 → +1, −1). q2 has no evidence, so β3 folds into β2 (0.9): its rollout 0 (M correct) gives
    # 0.1 + 0.9 = 1.0, its rollout 1 (M wrong) 0.1 (mean .55, std .45 → +1, −1).
    st, trajectories = hand_inputs()
    st[("q2", 0)] = stats(0, ["b.r0.t0"], query="q2")
    st[("q2", 1)] = stats(1, ["b.r1.t0"], m_correct=0.0, query="q2")
    q2 = {"b.r0.t0": sub("b.r0.t0", 0, "found it", query="q2"), "b.r1.t0": sub("b.r1.t0", 1, "found it", query="q2")}
    arrived = {
        "att.r0.t0": trajectories["att.r0.t0"],
        "b.r0.t0": q2["b.r0.t0"],
        "att.r1.t1": trajectories["att.r1.t1"],
        "b.r1.t0": q2["b.r1.t0"],
    }
    batch, _ = build(arrived, st, d=1, query_ids=("q1", "q2"))
    np.testing.assert_allclose(batch.rewards, [1.0, 1.0, 0.6, 0.1])
    np.testing.assert_allclose(batch.advantages, [1.0, 1.0, -1.0, -1.0], rtol=1e-6)
    assert [s.split("/")[0] for s in batch.sample_ids] == ["q1", "q2", "q1", "q2"]


def test_a_shortfall_is_filled_with_placeholders_and_failed_or_unnamed_calls_do_not_count():
    st, trajectories = hand_inputs()
    st[("q1", 1)] = stats(1, ["att.r1.t0", "att.r1.t1", "att.r1.t2"], failed=True)  # its calls no longer count
    trajectories["stray"] = sub("att.r0.t9", 0, "named by no rollout")
    batch, figures = build({"stray": trajectories.pop("stray"), **trajectories}, st, d=2)
    assert [SAMPLE_KINDS[i] for i in batch.kinds] == ["original", "placeholder", "placeholder", "placeholder"]
    np.testing.assert_array_equal(batch.weights, [1, 0, 0, 0])
    np.testing.assert_array_equal(batch.advantages, [0, 0, 0, 0])  # one counted member: no signal
    assert figures["failed_rollouts"] == 1 and figures["placeholders"] == 3


def test_fifo_calls_keeps_arrival_order():
    st, trajectories = hand_inputs()
    assert fifo_calls(plan(), st, trajectories) == [
        (0, 0, "att.r0.t0"),
        (0, 1, "att.r1.t0"),
        (0, 1, "att.r1.t1"),
        (0, 1, "att.r1.t2"),
    ]


@pytest.mark.parametrize("mode", ["none", "none-per-step"])
def test_the_aligned_builder_refuses_the_unaligned_modes(mode):
    from mgrpo_actors.algo.alignment import align

    with pytest.raises(ValueError, match="mode"):
        align([[["a"], ["b"]]], 2, np.random.default_rng(0), mode)
