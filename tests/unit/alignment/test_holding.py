"""What an aligner holds of its steps (alignment/holding.py), docs/architecture.md §One training step, step 5 and
§Delivery and state: the first copy of each piece (repeats counted as redelivered or superseded), every delivery
held until the step's batch is out, late pieces of a published step counted, the published record read from KV
once, timed-out steps and failed publishes due on a tick, and the figures a published batch carries."""

import json
from types import SimpleNamespace

from mgrpo_actors.alignment.holding import HeldStep, StepHolding, batch_figures, batch_record
from protocols import StepPlan


def piece(attempt="a1", name="t"):
    return SimpleNamespace(attempt=attempt, name=name)


def plan(step=0, query_ids=("q1",), k=2):
    return StepPlan(
        run_id="run", step=step, query_ids=list(query_ids), num_rollouts=k, main_version=0, sub_versions={"sub": 0}
    )


class Kv:
    """The aligner's KV records by step, counting the reads."""

    def __init__(self, records=None):
        self.records, self.reads = dict(records or {}), []

    def __call__(self, step):
        self.reads.append(step)
        return self.records.get(step)


def test_keep_first_counts_redelivered_pieces_and_superseded_attempts():
    held = HeldStep(step=0)
    first = piece("a1", "first")
    held.keep_first("trajectories", ("q1", 0), first)
    held.keep_first("trajectories", ("q1", 0), piece("a1", "redelivered"))
    held.keep_first("trajectories", ("q1", 0), piece("a1", "again"))
    held.keep_first("trajectories", ("q1", 0), piece("a2", "another attempt"))
    held.keep_first("trajectories", ("q1", 1), piece("a2", "other rollout"))
    assert held.collection("trajectories")[("q1", 0)] is first
    assert len(held.collection("trajectories")) == 2
    assert held.counts == {"redelivered": 2, "superseded": 1}


def test_pieces_of_a_step_are_held_with_their_deliveries():
    holding = StepHolding(Kv())
    a = holding.hold(3, "delivery-a")
    b = holding.hold(3, "delivery-b")
    other = holding.hold(4, "delivery-c")
    assert a is b and a.step == 3 and a.deliveries == ["delivery-a", "delivery-b"]
    assert other.deliveries == ["delivery-c"] and sorted(holding.steps) == [3, 4]
    assert holding.late == 0


def test_the_first_plan_counts_and_starts_the_timeout():
    holding = StepHolding(Kv())
    first, again = plan(step=2), plan(step=2)
    held = holding.hold_plan(first, "d1", now=10.0)
    assert holding.hold_plan(again, "d2", now=50.0) is held
    assert held.plan is first and held.plan_seen_at == 10.0 and held.deliveries == ["d1", "d2"]


def test_pieces_of_a_published_step_are_late_and_the_record_is_read_once():
    record = {"batch_id": "run-main-step0", "num_samples": 4, "num_chunks": 1}
    kv = Kv({0: json.dumps(record).encode()})
    holding = StepHolding(kv)
    assert holding.hold(0, "d1") is None
    assert holding.hold(0, "d2") is None
    assert holding.late == 2 and holding.steps == {}
    assert holding.published_record(0) == record
    assert kv.reads == [0]  # cached after the first read
    assert holding.published_record(1) is None and holding.published_record(1) is None
    assert kv.reads == [0, 1, 1]  # nothing published: asked again (another aligner may have published it)


def test_release_records_the_batch_and_hands_back_every_delivery():
    holding = StepHolding(Kv())
    held = holding.hold_plan(plan(step=5), "plan", now=0.0)
    holding.hold(5, "t0")
    record = {"batch_id": "b5", "num_samples": 2, "num_chunks": 1}
    assert holding.release(held, record) == ["plan", "t0"]
    assert holding.steps == {} and holding.published == {5: record}
    assert holding.hold(5, "t1") is None and holding.late == 1


def test_due_steps_are_timed_out_ones_and_complete_ones_whose_publish_failed():
    holding = StepHolding(Kv())
    holding.hold(0, "no plan yet")  # never due: without its plan the step has no shape
    timed_out = holding.hold_plan(plan(step=1), "p1", now=0.0)
    retried = holding.hold_plan(plan(step=2), "p2", now=95.0)
    retried.publish_failures = 1
    failed_incomplete = holding.hold_plan(plan(step=3), "p3", now=95.0)
    failed_incomplete.publish_failures = 2
    waiting = holding.hold_plan(plan(step=4), "p4", now=95.0)

    def complete(held):
        return held.step in (2, 4)

    assert holding.due(now=100.0, timeout_s=60.0, complete=complete) == [(timed_out, True), (retried, False)]
    # later the others time out too; a failed complete step is retried, never counted as timed out
    due = holding.due(now=200.0, timeout_s=60.0, complete=complete)
    assert [(held.step, flag) for held, flag in due] == [(1, True), (2, False), (3, True), (4, True)]
    assert waiting in [held for held, _ in due]


def test_the_record_and_figures_of_a_published_batch():
    batch = SimpleNamespace(batch_id="run-main-step7", sample_ids=["s0", "s1", "s2"])  # an AlignedBatch's two fields
    assert batch_record(batch, num_chunks=2) == {"batch_id": "run-main-step7", "num_samples": 3, "num_chunks": 2}
    held = HeldStep(step=7, counts={"redelivered": 2, "superseded": 1})
    figures = batch_figures({"reward_mean": 0.5}, held, late=4, timed_out=True, num_chunks=2)
    assert figures == {
        "reward_mean": 0.5,
        "redelivered": 2.0,
        "superseded": 1.0,
        "late": 4.0,
        "timed_out": 1.0,
        "chunks": 2.0,
    }


def test_a_refused_kept_piece_gives_its_place_to_another_attempts_copy():
    held = HeldStep(step=0)
    forged, redelivered, real = piece("a1", "forged"), piece("a1", "same attempt"), piece("a2", "real")
    d_forged, d_redelivered, d_real = object(), object(), object()
    held.deliveries += [d_forged, d_redelivered, d_real]
    held.keep_first("trajectories", "call", forged, d_forged)
    held.keep_first("trajectories", "call", redelivered, d_redelivered)  # a duplicate: no alternate
    held.keep_first("trajectories", "call", real, d_real)  # another attempt: kept as the alternate
    assert held.drop_kept("trajectories", "call") is d_forged
    assert held.collection("trajectories")["call"] is real
    assert held.deliveries == [d_redelivered, d_real]  # the dropped one is dead-lettered, not acked with the step
    assert held.drop_kept("trajectories", "call") is d_real
    assert "call" not in held.collection("trajectories") and held.deliveries == [d_redelivered]
