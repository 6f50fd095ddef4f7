"""The sub aligner's pure math (alignment/sub.py), docs/method.md §Rewards, §Trajectory alignment and
§Group-relative advantages: R_S = β1·r_format(S) + β2·r_correct(M) + β3·r_expert if S's format is valid
(r_correct(M) = 0 when M's format was invalid; r_expert only for what S found beyond its task), every
rollout aligned to D slots, one advantage group of D·K slots per query. Expected numbers are worked
out by hand in the comments."""

import math

import numpy as np
import pytest

from mgrpo_actors.algo.config import AlgoConfig
from mgrpo_actors.alignment.sub import alignment_rng, build_sub_batch
from mgrpo_actors.envs.qa import Evidence, Question
from mgrpo_actors.rollout.config import RolloutConfig
from protocols import SAMPLE_KINDS, RewardStats, StepPlan, Trajectory
from tests.unit.alignment.checked import checked

ALGO = AlgoConfig()  # β = 0.1 / 0.4 / 0.5, population std, duplicate mode
ROLLOUT = RolloutConfig()  # expert judge: the local rule "S's findings contain an evidence reference"
# expert references: the fact "Jedburgh" and "Mary Somerville" ("Ada Lovelace" is named by the question).
QUESTION = Question(
    id="q1",
    question="Where was Ada Lovelace's teacher born?",
    answer="Jedburgh",
    evidence=(
        Evidence(
            subject="Mary Somerville", fact="Jedburgh", urls=("u1", "u2"), entities=("Ada Lovelace", "Mary Somerville")
        ),
    ),
)
TASK = "Where was Mary Somerville born?"  # M already names Mary Somerville: echoing her earns nothing


def plan(k=2, query_ids=("q1",)):
    return StepPlan(
        run_id="run", step=3, query_ids=list(query_ids), num_rollouts=k, main_version=0, sub_versions={"sub": 0}
    )


def stats(k, calls, m_format=True, m_correct=1.0, failed=False, query="q1"):
    return RewardStats(
        run_id="run",
        step=3,
        query_id=query,
        rollout_index=k,
        reward_main=0.0,
        r_format=float(m_format),
        r_correct=m_correct,
        num_sub_calls=len(calls),
        sub_call_ids=list(calls),
        attempt="att",
        failed=failed,
    )


def sub(call, k, findings, format_ok=True, result_ok=True, n_tokens=2, query="q1", task=TASK):
    """S's trajectory of `call`: tokens [n, n+1, …] with n = 10·(rollout) + call number, first token prompt."""
    first = 10 * k + int(call[-1])
    mask = np.ones(n_tokens, np.uint8)
    mask[0] = 0
    return Trajectory(
        run_id="run",
        side="sub",
        step=3,
        query_id=query,
        rollout_index=k,
        call_id=call,
        policy_version=2,
        token_ids=np.arange(first, first + n_tokens, dtype=np.int32),
        loss_mask=mask,
        logprobs=-0.25 * mask.astype(np.float32),
        format_ok=format_ok,
        attempt="att",
        task=task,
        findings=findings,
        result_ok=result_ok,
        temperature=0.8,
    )


# The hand case: B = 1, K = 2, D = 2.
#   rollout 0: M format valid, r_correct 1 → r_correct(M) = 1; d_0 = 1 (one duplicate):
#     att.r0.t0: S ok, task "Who taught Ada Lovelace?", found "Mary Somerville" → r_expert 1
#                R_S = 0.1·1 + 0.4·1 + 0.5·1 = 1.0
#   rollout 1: M format INVALID, r_correct 1 → r_correct(M) counts 0; d_1 = 3 (one dropped):
#     att.r1.t0: S ok, findings only echo the task's "Mary Somerville" → r_expert 0 → R_S = 0.1
#     att.r1.t1: S ok, found "Jedburgh"                                 → r_expert 1 → R_S = 0.1 + 0.5 = 0.6
#     att.r1.t2: S format invalid (found "Jedburgh" all the same)       → R_S = 0
R_S = {"att.r0.t0": 1.0, "att.r1.t0": 0.1, "att.r1.t1": 0.6, "att.r1.t2": 0.0}
# The group is the D·K = 4 slots [1.0, 1.0 (duplicate), kept two of rollout 1], by which call was dropped:
#   drop t0 → [1, 1, 0.6, 0]:   mean 2.6/4 = 0.65;  dev  .35, .35, −.05, −.65;
#                               var (.1225·2 + .0025 + .4225)/4 = .1675
#   drop t1 → [1, 1, 0.1, 0]:   mean 2.1/4 = 0.525; dev .475, .475, −.425, −.525;
#                               var (.225625·2 + .180625 + .275625)/4 = .226875
#   drop t2 → [1, 1, 0.1, 0.6]: mean 2.7/4 = 0.675; dev .325, .325, −.575, −.075;
#                               var (.105625·2 + .330625 + .005625)/4 = .136875
HAND = {
    "att.r1.t0": ([1, 1, 0.6, 0], [0.35, 0.35, -0.05, -0.65], 0.1675),
    "att.r1.t1": ([1, 1, 0.1, 0], [0.475, 0.475, -0.425, -0.525], 0.226875),
    "att.r1.t2": ([1, 1, 0.1, 0.6], [0.325, 0.325, -0.575, -0.075], 0.136875),
}


def hand_inputs(m1_format=False):
    trajectories = {
        "att.r0.t0": sub("att.r0.t0", 0, "Her teacher was Mary Somerville.", task="Who taught Ada Lovelace?"),
        "att.r1.t0": sub("att.r1.t0", 1, "Mary Somerville was a scientist."),
        "att.r1.t1": sub("att.r1.t1", 1, "She was born in Jedburgh."),
        "att.r1.t2": sub("att.r1.t2", 1, "Jedburgh", format_ok=False),
    }
    st = {
        ("q1", 0): stats(0, ["att.r0.t0"]),
        ("q1", 1): stats(1, ["att.r1.t0", "att.r1.t1", "att.r1.t2"], m_format=m1_format),
    }
    return st, trajectories


def build(st, trajectories, d=2, seed=0, algo=ALGO, rollout=ROLLOUT, k=2, questions=None):
    questions = {"q1": QUESTION} if questions is None else questions
    step = plan(k)
    batch, metrics, alignment = build_sub_batch(
        step, st, trajectories, d, alignment_rng(seed, 3), algo, rollout, questions
    )
    return checked(batch, step, algo), metrics, alignment


def test_hand_case_every_drop():
    seen = set()
    for seed in range(40):
        batch, metrics, alignment = build(*hand_inputs(), seed=seed)
        (dropped,) = [key[2] for key in alignment.dropped[0][1]]
        seen.add(dropped)
        kept = [c for c in ("att.r1.t0", "att.r1.t1", "att.r1.t2") if c != dropped]
        rewards, deviations, var = HAND[dropped]
        assert len(batch.sample_ids) == 1 * 2 * 2  # B·K·D
        assert batch.sample_ids == [
            "q1/att/r0/att.r0.t0#0",
            "q1/att/r0/att.r0.t0#1",
            f"q1/att/r1/{kept[0]}#0",
            f"q1/att/r1/{kept[1]}#1",
        ]
        assert dropped not in "".join(batch.sample_ids)
        assert [SAMPLE_KINDS[i] for i in batch.kinds] == ["original", "duplicate", "original", "original"]
        np.testing.assert_allclose(batch.rewards, rewards, atol=1e-6)
        np.testing.assert_allclose(batch.rewards, [R_S["att.r0.t0"]] * 2 + [R_S[c] for c in kept], atol=1e-6)
        np.testing.assert_allclose(batch.advantages, np.array(deviations) / math.sqrt(var), atol=1e-5)
        np.testing.assert_array_equal(batch.weights, [1, 1, 1, 1])
        assert batch.d == 2 and batch.side == "sub" and batch.batch_id == "run-sub-step3"
        # reward_mean is over every call judged (the dropped one too): (1 + 0.1 + 0.6 + 0) / 4 = 0.425
        assert metrics["reward_mean"] == pytest.approx(0.425)
        assert (metrics["calls"], metrics["samples"], metrics["original"], metrics["duplicates"]) == (4, 4, 3, 1)
        assert (metrics["dropped"], metrics["placeholders"], metrics["lost"], metrics["failed_rollouts"]) == (
            1,
            0,
            0,
            0,
        )
        assert (metrics["d"], metrics["dk_mean"], metrics["dk_max"]) == (2, 2.0, 3)
    assert seen == set(HAND)  # every one of the three drops was checked


def test_main_format_valid_pays_r_correct():
    # Rollout 1's M format valid now: r_correct(M) = 1 → t0: 0.1 + 0.4 = 0.5; t1: 0.1 + 0.4 + 0.5 = 1.0;
    # t2: S format invalid → still 0. reward_mean = (1.0 + 0.5 + 1.0 + 0) / 4 = 0.625
    _, metrics, _ = build(*hand_inputs(m1_format=True))
    assert metrics["reward_mean"] == pytest.approx(0.625)


def test_tokens_lengths_and_sampling_follow_the_slots():
    batch, _, alignment = build(*hand_inputs(), seed=1)
    kept = [key[2] for key in alignment.ids if key[1] == 1 and key not in alignment.dropped[0][1]]
    calls = ["att.r0.t0", "att.r0.t0"] + kept
    np.testing.assert_array_equal(batch.lengths, [2, 2, 2, 2])
    expected = [tok for c in calls for tok in (10 * int(c[5]) + int(c[-1]), 10 * int(c[5]) + int(c[-1]) + 1)]
    np.testing.assert_array_equal(batch.token_ids, expected)  # the duplicate repeats its source's tokens
    np.testing.assert_array_equal(batch.loss_mask, [0, 1] * 4)
    np.testing.assert_allclose(batch.logprobs, [0, -0.25] * 4)
    np.testing.assert_array_equal(batch.policy_versions, [2] * 4)
    np.testing.assert_allclose(batch.temperatures, [0.8] * 4)


def test_same_seed_same_batch():
    a, ma, pa = build(*hand_inputs(), seed=7)
    b, mb, pb = build(*hand_inputs(), seed=7)
    assert a == b and ma == mb
    np.testing.assert_array_equal(pa.source, pb.source)
    dropped = {build(*hand_inputs(), seed=s)[2].dropped[0][1] for s in range(10)}
    assert len(dropped) > 1  # the seed does decide


def test_failed_missing_and_lost():
    # K = 3, D = 3. Rollout 0 failed (its sub call must not be used), rollout 1 has no stats at all,
    # rollout 2 names two calls but only att.r2.t0 arrived → d_2 = 1: original + 2 duplicates, lost = 1.
    trajectories = {"att.r0.t0": sub("att.r0.t0", 0, "Jedburgh"), "att.r2.t0": sub("att.r2.t0", 2, "Jedburgh")}
    st = {("q1", 0): stats(0, ["att.r0.t0"], failed=True), ("q1", 2): stats(2, ["att.r2.t0", "att.r2.t1"])}
    batch, metrics, _ = build(st, trajectories, d=3, k=3)
    assert len(batch.sample_ids) == 9
    assert batch.sample_ids[:6] == [f"q1/att/r0/-#{j}" for j in range(3)] + [f"q1/-/r1/-#{j}" for j in range(3)]
    assert batch.sample_ids[6:] == [f"q1/att/r2/att.r2.t0#{j}" for j in range(3)]
    assert [SAMPLE_KINDS[i] for i in batch.kinds] == ["failed"] * 6 + ["original", "duplicate", "duplicate"]
    np.testing.assert_array_equal(batch.weights, [0] * 6 + [1] * 3)
    np.testing.assert_array_equal(batch.lengths, [1] * 6 + [2] * 3)
    np.testing.assert_array_equal(batch.loss_mask[:6], [0] * 6)
    np.testing.assert_array_equal(batch.rewards, [0] * 6 + [1.0] * 3)  # 0.1 + 0.4·1 + 0.5·1 = 1.0
    # The one counted group is three copies of 1.0: std 0 → no signal, advantages 0 (placeholders too).
    np.testing.assert_array_equal(batch.advantages, [0] * 9)
    assert (metrics["lost"], metrics["failed_rollouts"], metrics["calls"], metrics["placeholders"]) == (1, 2, 1, 6)


def test_rollout_without_calls_gets_placeholders():
    # d_0 = 0 (M never delegated, not failed) → D "placeholder" rows; rollout 1: t0 (R 1.0) and t1 (R 0.1
    # as in the hand case, M valid now: 0.1 + 0.4 = 0.5). Group = the 2 counted slots [1.0, 0.5]:
    # mean 0.75, dev ±0.25, std 0.25 → A = +1, −1.
    trajectories = {"att.r1.t0": sub("att.r1.t0", 1, "Jedburgh"), "att.r1.t1": sub("att.r1.t1", 1, "Mary Somerville")}
    st = {("q1", 0): stats(0, []), ("q1", 1): stats(1, ["att.r1.t0", "att.r1.t1"])}
    batch, metrics, _ = build(st, trajectories)
    assert [SAMPLE_KINDS[i] for i in batch.kinds] == ["placeholder", "placeholder", "original", "original"]
    assert batch.sample_ids[:2] == ["q1/att/r0/-#0", "q1/att/r0/-#1"]
    np.testing.assert_allclose(batch.rewards, [0, 0, 1.0, 0.5], atol=1e-6)
    np.testing.assert_allclose(batch.advantages, [0, 0, 1, -1], atol=1e-5)
    np.testing.assert_array_equal(batch.weights, [0, 0, 1, 1])
    assert (metrics["failed_rollouts"], metrics["placeholders"]) == (0, 2)


def test_mask_mode_counts_only_real_slots():
    # mode mask, D = 2, d_0 = d_1 = 1: [orig, placeholder] per rollout; group = Σ min(d_k, D) = 2 slots:
    # r0: found "Jedburgh" → 1.0; r1: echo only → 0.1 + 0.4 = 0.5 → mean 0.75, std 0.25 → A = +1, −1.
    trajectories = {"att.r0.t0": sub("att.r0.t0", 0, "Jedburgh"), "att.r1.t0": sub("att.r1.t0", 1, "Mary Somerville")}
    st = {("q1", 0): stats(0, ["att.r0.t0"]), ("q1", 1): stats(1, ["att.r1.t0"])}
    batch, _, _ = build(st, trajectories, algo=AlgoConfig.from_dict({"alignment": {"mode": "mask"}}))
    assert [SAMPLE_KINDS[i] for i in batch.kinds] == ["original", "placeholder", "original", "placeholder"]
    np.testing.assert_allclose(batch.advantages, [1, 0, -1, 0], atol=1e-5)
    np.testing.assert_array_equal(batch.weights, [1, 0, 1, 0])


def test_expert_needs_a_result_and_folds_without_a_judge():
    # D = 1, K = 2, both calls "found" Jedburgh, but r0's call returned no result (result_ok False):
    #   r0: 0.1 + 0.4·1 + 0.5·0 = 0.5 ; r1: 0.1 + 0.4 + 0.5 = 1.0 → mean .75, std .25 → A = −1, +1
    trajectories = {
        "att.r0.t0": sub("att.r0.t0", 0, "Jedburgh", result_ok=False),
        "att.r1.t0": sub("att.r1.t0", 1, "Jedburgh"),
    }
    st = {("q1", 0): stats(0, ["att.r0.t0"]), ("q1", 1): stats(1, ["att.r1.t0"], m_correct=0.0)}
    # r1's M was wrong now: r1 = 0.1 + 0.4·0 + 0.5·1 = 0.6 → [0.5, 0.6]: mean .55, std .05 → A = −1, +1
    batch, _, _ = build(st, trajectories, d=1)
    np.testing.assert_allclose(batch.rewards, [0.5, 0.6], atol=1e-6)
    np.testing.assert_allclose(batch.advantages, [-1, 1], atol=1e-4)
    # No expert judge: β3 folds into β2 (0.4 + 0.5 = 0.9): r0 = 0.1 + 0.9·1 = 1.0 ; r1 = 0.1 + 0.9·0 = 0.1
    batch, _, _ = build(st, trajectories, d=1, rollout=RolloutConfig(expert=None))
    np.testing.assert_allclose(batch.rewards, [1.0, 0.1], atol=1e-6)
    # A question the aligner does not know has no evidence to check: folded the same way.
    batch, _, _ = build(st, trajectories, d=1, questions={})
    np.testing.assert_allclose(batch.rewards, [1.0, 0.1], atol=1e-6)
