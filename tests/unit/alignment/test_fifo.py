"""The unsynchronised ablation (`algo.alignment.mode: none`; alignment/fifo_queue.py, unaligned.py
build_fifo_sub_batch), docs/method.md §Training schedule: counted sub trajectories queue across steps, each step's
batch takes the first B·K·D (older leftovers first, in order), leftovers wait for the next step (at most B·K·D,
the oldest beyond dropped and counted), a shortfall becomes placeholders, and advantages are normalised over
consecutive chunks of K·D in queue order regardless of query. Every call here earns R_S = 1 (S found the teacher,
M was right) or R_S = 0 (S's format invalid), so the chunk statistics are worked out by hand in the comments."""

import dataclasses
import math

import numpy as np
import pytest

from mgrpo_actors.algo.config import AdvantageConfig, AlgoConfig, AlignmentConfig
from mgrpo_actors.alignment.batch_rows import placeholder_row
from mgrpo_actors.alignment.fifo_queue import FifoQueue, chunk_advantages, take
from mgrpo_actors.alignment.unaligned import build_fifo_sub_batch, build_unaligned_sub_batch
from mgrpo_actors.rollout.config import RolloutConfig
from protocols import SAMPLE_KINDS, StepPlan
from tests.unit.alignment.checked import checked
from tests.unit.alignment.test_sub import QUESTION, stats, sub

ALGO = AlgoConfig.from_dict({"alignment": {"mode": "none"}})
QUESTIONS = {"q1": QUESTION}  # q2 has no evidence: its R_S is 0 here all the same (S's format invalid)


def plan(step, k=2, query_ids=("q1",)):
    return StepPlan(
        run_id="run",
        step=step,
        query_ids=list(query_ids),
        num_rollouts=k,
        main_version=step,
        sub_versions={"sub": step},
    )


def inputs(step, arrivals, k=2, query_ids=("q1",)):
    """Stats and trajectories of `step`: `arrivals` is (query, rollout, R_S ∈ {0, 1}) in arrival order, each a
    call "s<step>.<query>.r<k>.t<n>" of attempt "s<step>" sampled by policy version `step`."""
    trajectories, named = {}, {(q, r): [] for q in query_ids for r in range(k)}
    for n, (query, rollout, reward) in enumerate(arrivals):
        name = f"s{step}.{query}.r{rollout}.t{n}"
        made = sub(name, rollout, "Her teacher was Mary Somerville.", format_ok=reward == 1, query=query)
        trajectories[name] = dataclasses.replace(
            made, task="Who taught Ada Lovelace?", step=step, attempt=f"s{step}", policy_version=step
        )
        named[(query, rollout)].append(name)
    st = {
        (q, r): dataclasses.replace(stats(r, names, query=q), step=step, attempt=f"s{step}")
        for (q, r), names in named.items()
    }
    return st, trajectories


def build(step, queue, arrivals, d=2, k=2, query_ids=("q1",)):
    st, trajectories = inputs(step, arrivals, k, query_ids)
    the_plan = plan(step, k, query_ids)
    batch, *rest = build_fifo_sub_batch(the_plan, st, trajectories, d, ALGO, RolloutConfig(), QUESTIONS, queue)
    return (checked(batch, the_plan, ALGO), *rest)


def calls(batch):
    """The call id of each sample ("-" for a placeholder)."""
    return [s.split("/")[3].split("#")[0] for s in batch.sample_ids]


def test_leftovers_open_the_next_steps_batch_in_order_and_chunks_are_normalised():
    # B = 1, K = 2, D = 2: 4 slots, one chunk of K·D = 4.
    # Step 0: 6 counted calls R [1, 0, 0, 1 | 1, 0]: the batch is the first 4, mean .5, population std .5
    # → A [1, −1, −1, 1]; t4 and t5 wait.
    arrivals0 = [("q1", 0, 1), ("q1", 1, 0), ("q1", 1, 0), ("q1", 0, 1), ("q1", 1, 1), ("q1", 0, 0)]
    batch0, figures0, queue = build(0, FifoQueue(), arrivals0)
    assert calls(batch0) == ["s0.q1.r0.t0", "s0.q1.r1.t1", "s0.q1.r1.t2", "s0.q1.r0.t3"]
    np.testing.assert_allclose(batch0.rewards, [1, 0, 0, 1])
    np.testing.assert_allclose(batch0.advantages, [1, -1, -1, 1], rtol=1e-6)
    assert (figures0["carried"], figures0["queued"], figures0["dropped"], figures0["calls"]) == (0, 2, 0, 6)
    assert [row.sample_id.split("/")[3] for row in queue.rows] == ["s0.q1.r1.t4#0", "s0.q1.r0.t5#0"]
    # Step 1: 2 new calls, R 1 and 1. The batch is t4, t5 of step 0, then step 1's: R [1, 0, 1, 1]: mean .75,
    # deviations .25, −.75, .25, .25, variance (3·.0625 + .5625)/4 = .1875 = 3/16, std √3/4
    # → A [1/√3, −√3, 1/√3, 1/√3].
    batch1, figures1, queue = build(1, queue, [("q1", 0, 1), ("q1", 1, 1)])
    assert calls(batch1) == ["s0.q1.r1.t4", "s0.q1.r0.t5", "s1.q1.r0.t0", "s1.q1.r1.t1"]
    np.testing.assert_allclose(batch1.rewards, [1, 0, 1, 1])
    r3 = math.sqrt(3)
    np.testing.assert_allclose(batch1.advantages, [1 / r3, -r3, 1 / r3, 1 / r3], rtol=1e-6)
    # Carried samples keep their own ids (attempt s0) and policy version: off-policy by one step.
    np.testing.assert_array_equal(batch1.policy_versions, [0, 0, 1, 1])
    assert [s.split("/")[1] for s in batch1.sample_ids] == ["s0", "s0", "s1", "s1"]
    assert len(set(batch0.sample_ids + batch1.sample_ids)) == 8
    assert (figures1["carried"], figures1["queued"], figures1["dropped"], figures1["placeholders"]) == (2, 0, 0, 0)
    assert queue.rows == () and queue.step == 1


def test_chunks_group_consecutive_samples_whatever_query_they_belong_to():
    # B = 2, K = 2, D = 1: 4 slots, chunks of K·D = 2. Arrivals q1:1, q2:0, q1:0, q2:0 → chunks [1, 0] (±1) and
    # [0, 0] (no signal): A [1, −1, 0, 0]. Grouped per query (none-per-step) q1 is [1, 0] at slots 0 and 2:
    # A [1, 0, −1, 0].
    arrivals = [("q1", 0, 1), ("q2", 0, 0), ("q1", 1, 0), ("q2", 1, 0)]
    batch, _, _ = build(0, FifoQueue(), arrivals, d=1, query_ids=("q1", "q2"))
    np.testing.assert_allclose(batch.advantages, [1, -1, 0, 0], rtol=1e-6)
    np.testing.assert_array_equal(batch.groups, [0, 0, 1, 1])  # what a learner drops together
    st, trajectories = inputs(0, arrivals, query_ids=("q1", "q2"))
    per_query, _ = build_unaligned_sub_batch(
        plan(0, query_ids=("q1", "q2")), st, trajectories, 1, ALGO, RolloutConfig(), QUESTIONS
    )
    np.testing.assert_allclose(per_query.advantages, [1, 0, -1, 0], rtol=1e-6)
    np.testing.assert_array_equal(per_query.groups, [0, 1, 0, 1])


def test_a_short_queue_is_filled_with_placeholders():
    # B = 1, K = 2, D = 2: step 0 leaves one call (R 1); step 1 brings one (R 0). Step 1's batch: the two, then
    # two placeholders; the chunk's counted members [1, 0]: mean .5, std .5 → A [1, −1].
    _, _, queue = build(0, FifoQueue(), [("q1", 0, 1)] * 4 + [("q1", 1, 1)])
    batch, figures, left = build(1, queue, [("q1", 0, 0)])
    assert [SAMPLE_KINDS[i] for i in batch.kinds] == ["original", "original", "placeholder", "placeholder"]
    np.testing.assert_array_equal(batch.weights, [1, 1, 0, 0])
    np.testing.assert_allclose(batch.advantages, [1, -1, 0, 0], rtol=1e-6)
    np.testing.assert_array_equal(batch.groups, [0, 0, -1, -1])
    assert calls(batch)[:2] == ["s0.q1.r1.t4", "s1.q1.r0.t0"]
    assert (figures["carried"], figures["placeholders"], figures["queued"]) == (1, 2, 0) and left.rows == ()


def test_the_queue_keeps_at_most_one_steps_worth_dropping_the_oldest():
    # B = 1, K = 2, D = 1: 2 slots, so at most 2 wait. Step 0: 5 calls, t0 t1 go out, t2 t3 t4 are left: t2 (the
    # oldest) is dropped. Step 1 (one call) takes t3 t4; its own call waits.
    batch0, figures0, queue = build(0, FifoQueue(), [("q1", 0, 1), ("q1", 1, 0)] * 2 + [("q1", 0, 1)], d=1)
    assert calls(batch0) == ["s0.q1.r0.t0", "s0.q1.r1.t1"]
    assert (figures0["dropped"], figures0["queued"]) == (1, 2)
    batch1, figures1, queue = build(1, queue, [("q1", 1, 0)], d=1)
    assert calls(batch1) == ["s0.q1.r1.t3", "s0.q1.r0.t4"]
    assert (figures1["carried"], figures1["dropped"], figures1["queued"]) == (2, 0, 1)
    assert [row.sample_id.split("/")[3] for row in queue.rows] == ["s1.q1.r1.t0#0"]


def test_take_drops_the_oldest_leftovers_beyond_the_bound():
    a, b, c, d = (placeholder_row(name, "placeholder") for name in "abcd")
    taken = take(FifoQueue((a, b, c), step=4), [d], slots=1, bound=2, step=5)
    assert taken.rows == [a] and taken.carried == 1 and taken.dropped == 1
    assert taken.left == FifoQueue((c, d), step=5)


def test_chunk_advantages_by_hand():
    population, unbiased = AdvantageConfig(), AdvantageConfig(std="unbiased")
    # [1, 0, 0, 1]: mean .5, population std .5 → ±1; unbiased std √(1/3) → ±√3/2.
    np.testing.assert_allclose(chunk_advantages([1, 0, 0, 1], 4, 4, population), [1, -1, -1, 1])
    half = math.sqrt(3) / 2
    np.testing.assert_allclose(chunk_advantages([1, 0, 0, 1], 4, 4, unbiased), [half, -half, -half, half])
    # 5 samples in 8 slots, chunks of 4: [1, 0, 1, 0] → ±1; the last chunk holds one sample → no signal, 0.
    np.testing.assert_allclose(chunk_advantages([1, 0, 1, 0, 1], 8, 4, population), [1, -1, 1, -1, 0])
    # Two chunks of 2: [.6, .1] mean .35, std .25 → ±1; [.5, .5] std 0 → 0.
    np.testing.assert_allclose(chunk_advantages([0.6, 0.1, 0.5, 0.5], 4, 2, population), [1, -1, 0, 0])
    with pytest.raises(ValueError, match="chunks of 3"):
        chunk_advantages([1, 0], 4, 3, population)


def test_the_within_step_variant_is_a_mode_of_its_own():
    assert AlignmentConfig(mode="none-per-step").mode == "none-per-step"
    with pytest.raises(ValueError, match="none-per-step"):  # the refusal lists it among the choices
        AlignmentConfig(mode="per-step")
