"""What an aligner checks of each piece before it may count (alignment/piece_checks.py): the plan asked for it,
an agent could have sent it, and a sub trajectory belongs to the rollout whose stats name it."""

import dataclasses

import numpy as np
import pytest

from mgrpo_actors.alignment.piece_checks import named_reason, plan_reason, stats_reason, trajectory_reason
from protocols import RewardStats, StepPlan, Trajectory

PLAN = StepPlan(run_id="run", step=3, query_ids=["q0", "q1"], num_rollouts=2, main_version=0, sub_versions={"sub": 0})
ATTEMPT = "0123456789ab"


def traj(side="sub", **kw):
    fields = {
        "run_id": "run",
        "side": side,
        "step": 3,
        "query_id": "q0",
        "rollout_index": 1,
        "call_id": f"{ATTEMPT}.r1.t2" if side == "sub" else "",
        "policy_version": 0,
        "token_ids": np.array([1, 2, 3, 4], np.int32),
        "loss_mask": np.array([0, 0, 1, 1], np.uint8),
        "logprobs": np.array([0, 0, -0.5, -0.1], np.float32),
        "prompt_len": 2,
        "attempt": ATTEMPT,
        "r_format": 1.0,
        "r_correct": 0.0,
    }
    return Trajectory(**{**fields, **kw})


def stats(**kw):
    fields = {
        "run_id": "run",
        "step": 3,
        "query_id": "q0",
        "rollout_index": 1,
        "reward_main": 0.5,
        "r_format": 1.0,
        "r_correct": 0.0,
        "num_sub_calls": 1,
        "sub_call_ids": [f"{ATTEMPT}.r1.t2"],
        "attempt": ATTEMPT,
    }
    return RewardStats(**{**fields, **kw})


def test_what_agents_send_passes():
    assert plan_reason(PLAN, traj()) is None and plan_reason(PLAN, stats()) is None
    assert trajectory_reason(traj()) is None and trajectory_reason(traj("main")) is None
    assert trajectory_reason(traj(call_id=f"{ATTEMPT}.r1.t2~1")) is None  # a retried call keeps its rollout
    assert stats_reason(stats()) is None and stats_reason(stats(num_sub_calls=0, sub_call_ids=[])) is None
    assert named_reason(traj(), stats()) is None


@pytest.mark.parametrize(
    ("piece", "reason"),
    [
        (traj(run_id="other"), "of run 'other', not 'run'"),
        (traj(query_id="q9"), "query 'q9' is not one of step 3's plan"),
        (stats(rollout_index=2), "rollout 2 where step 3's plan has K = 2"),
        (stats(rollout_index=-1), "rollout -1"),
    ],
)
def test_a_piece_the_plan_did_not_ask_for_is_refused(piece, reason):
    assert reason in plan_reason(PLAN, piece)


@pytest.mark.parametrize(
    ("piece", "reason"),
    [
        (traj(policy_version=-1), "policy version -1"),
        (traj(logprobs=np.zeros(3, np.float32)), "4 token ids but 4 mask and 3 logprob entries"),
        (traj(prompt_len=5), "prompt of 5 tokens in a trajectory of 4"),
        (traj("main", call_id="x.r0.t1"), "a main trajectory with call id"),
        (traj("main", r_correct=1e6), "r_correct 1e+06 outside [0, 1]"),
        (traj("main", r_format=-0.5), "r_format -0.5 outside"),
        (traj(call_id="c1"), "is not one a main agent makes"),
        (traj(call_id=f"{ATTEMPT}.r0.t2"), "is not of rollout 1"),
        (traj(call_id="ffffffffffff.r1.t2"), "is of attempt 'ffffffffffff'"),
    ],
)
def test_a_trajectory_no_agent_could_have_sent_is_refused(piece, reason):
    assert reason in trajectory_reason(piece)


@pytest.mark.parametrize(
    ("piece", "reason"),
    [
        (stats(num_sub_calls=3), "3 sub calls counted but 1 named"),
        (stats(num_sub_calls=2, sub_call_ids=["a.r1.t1", "a.r1.t1"]), "a sub call named twice"),
        (stats(r_correct=2.0), "r_correct 2 outside [0, 1]"),
    ],
)
def test_stats_no_main_agent_could_have_sent_are_refused(piece, reason):
    assert reason in stats_reason(piece)


def test_a_sub_trajectory_must_belong_to_the_rollout_whose_stats_name_it():
    assert "claims query 'q1'" in named_reason(traj(query_id="q1"), stats())
    other = "ba9876543210"
    forged = dataclasses.replace(traj(), attempt=other)  # trajectory_reason would refuse it already; named too
    assert f"attempt '{other}'" in named_reason(forged, stats())


def test_a_failed_rollouts_record_passes_and_a_failed_one_with_tokens_does_not():
    from mgrpo_actors.rollout.wire import failed_trajectory

    ids = {"run_id": "run", "step": 3, "query_id": "q0", "rollout_index": 1, "attempt": ATTEMPT}
    main = failed_trajectory("engine died", **ids, side="main", call_id="")
    sub = failed_trajectory("engine died", **ids, side="sub", call_id=f"{ATTEMPT}.r1.t2")
    assert main.policy_version == -1 and trajectory_reason(main) is None and plan_reason(PLAN, main) is None
    assert trajectory_reason(sub) is None
    assert "a failed trajectory with 4 tokens" in trajectory_reason(traj("main", failed=True))
