"""When an aligner's step is complete, and the sub side's extra figures and D update (alignment/main.py
main_complete; alignment/sub.py sub_complete, unknown_questions, unused_trajectories, observe_step),
docs/architecture.md §One training step, step 5 and docs/method.md §Trajectory alignment: main needs K
trajectories of each query (failed ones arrive too); sub needs the K stats of each query and every sub trajectory
a non-failed rollout names; D: auto learns only from rollouts that did not fail."""

from mgrpo_actors.algo.alignment import DEstimator
from mgrpo_actors.algo.config import AlignmentConfig
from mgrpo_actors.alignment.main import main_complete
from mgrpo_actors.alignment.sub import observe_step, sub_complete, unknown_questions, unused_trajectories
from mgrpo_actors.envs.qa import Question
from protocols import RewardStats, StepPlan

PLAN = StepPlan(run_id="run", step=1, query_ids=["q1", "q2"], num_rollouts=2, main_version=0, sub_versions={"sub": 0})


def stats(query, k, calls=(), failed=False):
    return RewardStats(
        run_id="run",
        step=1,
        query_id=query,
        rollout_index=k,
        reward_main=0.0,
        r_format=1.0,
        r_correct=1.0,
        num_sub_calls=len(calls),
        sub_call_ids=list(calls),
        failed=failed,
    )


def all_stats(**override):
    """Rollout k of query q calls "q-k-0" and "q-k-1"; `override` replaces some ("q1_0": RewardStats)."""
    found = {(q, k): stats(q, k, [f"{q}-{k}-0", f"{q}-{k}-1"]) for q in PLAN.query_ids for k in range(2)}
    for name, value in override.items():
        query, k = name.split("_")
        found[(query, int(k))] = value
    return found


def trajectories_of(found):
    return {c: object() for s in found.values() for c in s.sub_call_ids}


def test_main_needs_every_rollout_of_every_query():
    received = {(q, k): object() for q in PLAN.query_ids for k in range(2)}
    assert main_complete(PLAN, received)
    del received[("q2", 1)]
    assert not main_complete(PLAN, received)
    received[("q2", 1)] = object()
    received[("q3", 0)] = object()  # a piece of no query of the plan changes nothing
    assert main_complete(PLAN, received)


def test_sub_needs_every_stats_and_every_named_trajectory():
    found = all_stats()
    trajectories = trajectories_of(found)
    assert sub_complete(PLAN, found, trajectories)
    del trajectories["q1-1-0"]  # a named sub call not (yet) here
    assert not sub_complete(PLAN, found, trajectories)
    missing = all_stats()
    del missing[("q2", 0)]
    assert not sub_complete(PLAN, missing, trajectories_of(all_stats()))


def test_a_failed_rollouts_sub_calls_are_not_waited_for():
    found = all_stats(q1_1=stats("q1", 1, ["q1-1-0", "q1-1-1"], failed=True))
    trajectories = trajectories_of(found)
    del trajectories["q1-1-0"], trajectories["q1-1-1"]
    assert sub_complete(PLAN, found, trajectories)
    # a rollout without sub calls needs none
    assert sub_complete(PLAN, all_stats(q2_0=stats("q2", 0)), trajectories_of(all_stats()))


def test_unknown_questions_in_plan_order():
    questions = {"q2": Question(id="q2", question="?", answer="a")}
    assert unknown_questions(PLAN, questions) == ["q1"]
    assert unknown_questions(PLAN, {**questions, "q1": questions["q2"]}) == []


def test_unused_are_trajectories_no_counted_rollout_names():
    found = all_stats(q1_0=stats("q1", 0, ["q1-0-0"], failed=True))
    trajectories = trajectories_of(all_stats())  # q1-0-0 and q1-0-1 arrived; the failed rollout names q1-0-0 only
    trajectories["stray"] = object()  # e.g. a superseded attempt's call
    assert unused_trajectories(found, trajectories) == 3  # q1-0-0 (failed), q1-0-1 (not named), stray


def test_the_d_estimator_learns_only_from_rollouts_that_did_not_fail():
    estimator = DEstimator(AlignmentConfig(d="auto", quantile=1.0, d_initial=8))
    found = {
        ("q1", 0): stats("q1", 0, ["a", "b", "c"]),
        ("q1", 1): stats("q1", 1, ["d"]),
        ("q2", 0): stats("q2", 0, ["e"]),
        ("q2", 1): stats("q2", 1, ["f", "g", "h", "i", "j"], failed=True),  # 5 says nothing about d_k
    }
    assert estimator.d == 8
    d_next, histogram = observe_step(estimator, found)
    assert d_next == 3 and estimator.d == 3  # the largest d_k observed, at quantile 1
    assert histogram == {1: 2, 3: 1} and list(histogram) == [1, 3]
    assert estimator.state()["window"] == [3, 1, 1]


def test_a_fixed_d_stays():
    estimator = DEstimator(AlignmentConfig(d=4))
    assert observe_step(estimator, {("q1", 0): stats("q1", 0, ["a", "b", "c", "d", "e", "f"])}) == (4, {6: 1})
