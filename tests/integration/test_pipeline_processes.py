"""The actor pipeline as separate processes on a real nats-server: controller, 2 main agents,
2 sub-agents, 3 tool processes and both aligners, each `mgrpo-node --role …`, for 2 steps of tiny
models under the rule policy (tests/pipeline_policy.py). Checked from the batch streams: exact sizes,
advantages that follow from the rewards, every sample traced to its rollout; and, from every
process's delivery audit, that only subtask text and scalar statistics crossed between the sides."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from protocols import SAMPLE_KINDS, AlignedBatch, RewardStats, Trajectory
from tests.pipeline_helpers import EventLog, NodeProcesses, pipeline_config, read_stream, side_batches

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

B, K, D, STEPS = 3, 2, 2, 2
TOPOLOGY = {
    "controller": ["controller"],
    "main-agent-1": ["main-agent"],
    "main-agent-2": ["main-agent"],
    "sub-agent-1": ["sub-agent"],
    "sub-agent-2": ["sub-agent"],
    "tool-1": ["tool"],
    "tool-2": ["tool"],
    "tool-3": ["tool"],
    "main-aligner": ["main-aligner"],
    "sub-aligner": ["sub-aligner"],
}
MAIN_SIDE = ("main-agent-1", "main-agent-2", "main-aligner")
SUB_SIDE = ("sub-agent-1", "sub-agent-2", "sub-aligner")


@pytest.fixture(scope="module")
def finished_run(nats_server, tmp_path_factory):
    """Run the whole topology once for the module's tests; yields (bus, run id, processes' dir)."""
    from mgrpo_actors.runtime import Bus

    tmp = tmp_path_factory.mktemp("pipeline")
    run_id = "pipeline-procs"
    bus = Bus(nats_server.url, run_id=run_id, node="test").connect()
    events = EventLog(bus)
    nodes = NodeProcesses(nats_server.url, pipeline_config(tmp, run_id), tmp / "logs")
    try:
        for name, roles in TOPOLOGY.items():
            nodes.start(name, *roles)
        events.wait_for("run.finished", timeout_s=300, describe=lambda: nodes.tails())
        codes = nodes.stop_all()
        assert all(code == 0 for code in codes.values()), (codes, nodes.tails())
        yield bus, run_id, tmp, events
    finally:
        nodes.stop_all()
        bus.close()


def _rows(batch: AlignedBatch) -> list[dict]:
    ends = np.cumsum(batch.lengths)
    starts = ends - batch.lengths
    return [
        {
            "id": sid,
            "tokens": batch.token_ids[s:e],
            "mask": batch.loss_mask[s:e],
            "logprobs": batch.logprobs[s:e],
            "advantage": float(batch.advantages[i]),
            "weight": float(batch.weights[i]),
            "reward": float(batch.rewards[i]),
            "kind": SAMPLE_KINDS[batch.kinds[i]],
        }
        for i, (sid, s, e) in enumerate(zip(batch.sample_ids, starts, ends))
    ]


def _expected_advantages(rows: list[dict], group_of) -> dict[str, float]:  # noqa: ANN001
    """(R − mean) / population std over the counted rows of each group; 0 for degenerate groups or uncounted rows."""
    groups = defaultdict(list)
    for row in rows:
        if row["weight"] > 0:
            groups[group_of(row["id"])].append(row)
    expected = {row["id"]: 0.0 for row in rows}
    for members in groups.values():
        rewards = np.array([r["reward"] for r in members])
        std = rewards.std()
        for r in members:
            expected[r["id"]] = 0.0 if std <= 1e-6 else float((r["reward"] - rewards.mean()) / std)
    return expected


def test_every_step_has_exactly_one_batch_of_the_exact_size_per_side(finished_run):
    bus, run_id, _, events = finished_run
    main, sub = side_batches(bus, "main"), side_batches(bus, "sub")
    assert [b.step for b in main] == list(range(STEPS)) and [b.step for b in sub] == list(range(STEPS))
    for batch in main:
        assert len(batch.sample_ids) == B * K == len(batch.advantages) == len(batch.lengths)
        assert batch.lengths.sum() == len(batch.token_ids) == len(batch.loss_mask) == len(batch.logprobs)
    for batch in sub:
        assert len(batch.sample_ids) == B * K * D and batch.d == D
    assert len(events.kinds("step.finished")) == STEPS


def test_advantages_follow_from_the_rewards(finished_run):
    bus = finished_run[0]
    for side, group_of in (("main", lambda sid: sid.split("/")[0]), ("sub", lambda sid: sid.split("/")[0])):
        for batch in side_batches(bus, side):
            rows = _rows(batch)
            expected = _expected_advantages(rows, group_of)
            for row in rows:
                assert row["advantage"] == pytest.approx(expected[row["id"]], abs=1e-5), (side, row["id"])
            if side == "main":  # the rule policy makes half of each group malformed: there is signal
                assert any(abs(r["advantage"]) > 0.5 for r in rows)
    for batch in side_batches(bus, "sub"):
        for row in _rows(batch):
            if row["kind"] in ("placeholder", "failed"):
                assert row["weight"] == 0 and not row["mask"].any() and row["advantage"] == 0


def test_every_sample_traces_back_to_its_rollout(finished_run):
    bus = finished_run[0]
    subjects = bus.subjects
    main_trajs = {
        (t.query_id, t.attempt, t.rollout_index): t
        for t in read_stream(bus, subjects.stream("traj-main"))
        if isinstance(t, Trajectory)
    }
    sub_trajs = {t.call_id: t for t in read_stream(bus, subjects.stream("traj-sub")) if isinstance(t, Trajectory)}
    stats = {
        (s.query_id, s.attempt, s.rollout_index): s
        for s in read_stream(bus, subjects.stream("stats"))
        if isinstance(s, RewardStats)
    }
    for batch in side_batches(bus, "main"):
        for row in _rows(batch):
            query, attempt, rollout = row["id"].split("/")
            traj = main_trajs[(query, attempt, int(rollout[1:]))]
            assert traj.step == batch.step
            np.testing.assert_array_equal(row["tokens"], traj.token_ids)
            np.testing.assert_array_equal(row["logprobs"], traj.logprobs)
    sub_calls = 0
    for batch in side_batches(bus, "sub"):
        for row in _rows(batch):
            if row["weight"] == 0:
                continue
            query, attempt, rollout, rest = row["id"].split("/")
            call = rest.split("#")[0]
            traj = sub_trajs[call]
            assert (traj.query_id, traj.rollout_index, traj.step) == (query, int(rollout[1:]), batch.step)
            assert call in stats[(query, attempt, int(rollout[1:]))].sub_call_ids
            np.testing.assert_array_equal(row["tokens"], traj.token_ids)
            sub_calls += 1
    assert sub_calls > 0, "the rule policy delegates: the sub batches must hold real sub trajectories"


def _received(tmp: Path, node: str) -> list[dict]:
    return [json.loads(line) for line in (tmp / "deliveries" / f"{node}.jsonl").read_text().splitlines()]


def test_only_subtask_text_and_scalar_statistics_cross_between_the_sides(finished_run):
    tmp = finished_run[2]
    # What a process of one side may receive from the other side, and what it may receive at all.
    from_main_side = {"SubtaskRequest", "RewardStats"}  # what the sub side gets from the main side
    from_sub_side = {"SubtaskResult"}  # what the main side gets from the sub side
    neutral = {"StepPlan", "ToolResult", "NodePing", "Event"}  # the controller's plans, tools, operators
    # questions and gold answers stay on the main side
    own = {"sub": {"Trajectory"}, "main": {"Trajectory", "RolloutRequest"}}
    crossed = {"sub": 0, "main": 0}
    for node in SUB_SIDE:
        for record in _received(tmp, node):
            assert record["type"] in from_main_side | neutral | own["sub"], (node, record)
            assert record["side"] in (None, "sub"), (node, record)  # never a main-side trajectory or batch
            crossed["sub"] += record["type"] in from_main_side
    for node in MAIN_SIDE:
        for record in _received(tmp, node):
            assert record["type"] in from_sub_side | neutral | own["main"], (node, record)
            assert record["side"] in (None, "main"), (node, record)
            crossed["main"] += record["type"] in from_sub_side
    assert crossed["sub"] > 0 and crossed["main"] > 0
    print(f"messages that crossed sides: main -> sub {crossed['sub']}, sub -> main {crossed['main']}")
