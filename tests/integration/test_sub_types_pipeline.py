"""Two sub-agent types (1 + n, issue 22) as separate processes on a real nats-server: M, a `searcher` (search and
visit) and a `calculator` (the calculator tool), each type with its own sub-agent, aligner and DeepSpeed learner
process (`mgrpo-node --role sub-agent --sub-type searcher`, …), tools and a controller, for 2 synchronous steps of
tiny models under the rule policy (tests/pipeline_policy.py: M delegates to both types). Checked: every side's
learner applies every step; each type's batch has exactly B·K·D samples, its advantages follow from its own
rewards and it holds real trajectories of its type; each learner received only its own type's batches; and, from
every process's delivery audit, only subtask text and scalar statistics crossed between any two sides."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest

from protocols import Metric, StepDone, Trajectory
from tests.helpers import wait_until
from tests.pipeline_helpers import EventLog, NodeProcesses, read_stream, received, side_batches, two_type_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(500)]

B, K, D, STEPS = 2, 2, 2, 2
TYPES = ("searcher", "calculator")
SIDES = ("main", *TYPES)
# node name -> (roles, extra arguments)
TOPOLOGY: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "tool": (["tool"], ()),
    **{f"{t}-agent": (["sub-agent"], ("--sub-type", t)) for t in TYPES},
    **{f"{t}-aligner": (["sub-aligner"], ("--sub-type", t)) for t in TYPES},
    **{f"{t}-learner": (["sub-learner"], ("--sub-type", t)) for t in TYPES},
    "main-agent": (["main-agent"], ()),
    "main-aligner": (["main-aligner"], ()),
    "main-learner": (["main-learner"], ()),
    "controller": (["controller"], ()),
}
NODES_OF = {side: [n for n in TOPOLOGY if n.startswith(f"{side}-")] for side in SIDES}


@pytest.fixture(scope="module")
def finished_run(nats_server, tmp_path_factory):
    """Run the whole topology once for the module's tests; yields (bus, processes' dir)."""
    from mgrpo_actors.runtime import Bus

    tmp = tmp_path_factory.mktemp("sub-types")
    run_id = "sub-types"
    learner = {"frozen": False, "lr": 1e-2, "checkpoint_every": 0, "micro_batch_samples": 4}
    config = two_type_config(
        tmp, run_id, (B, K, D, STEPS), pipeline={"advance_on": "learners"}, learners={"main": learner, "sub": learner}
    )
    bus = Bus(nats_server.url, run_id=run_id, node="test", sub_types=TYPES).connect()
    events = EventLog(bus)
    nodes = NodeProcesses(nats_server.url, config, tmp / "logs")
    try:
        for name, (roles, extra) in TOPOLOGY.items():
            nodes.start(name, *roles, extra=extra)
        events.wait_for("run.finished", timeout_s=400, describe=lambda: nodes.tails())
        codes = nodes.stop_all()
        assert all(code == 0 for code in codes.values()), (codes, nodes.tails())
        yield bus, tmp
    finally:
        nodes.stop_all()
        bus.close()


def test_every_sides_learner_applies_every_step_in_order(finished_run):
    bus, _ = finished_run
    done = [m for m in read_stream(bus, bus.subjects.stream("steps")) if isinstance(m, StepDone)]
    for side in SIDES:
        assert [(d.step, d.version) for d in done if d.side == side] == [(s, s + 1) for s in range(STEPS)], side


def test_each_type_has_one_batch_of_b_k_d_samples_per_step_of_its_own_trajectories(finished_run):
    bus, _ = finished_run
    for sub_type in TYPES:
        batches = side_batches(bus, sub_type)
        assert sorted(b.step for b in batches) == list(range(STEPS)), sub_type
        own = {
            t.call_id: t for t in read_stream(bus, bus.subjects.stream(f"traj-{sub_type}")) if isinstance(t, Trajectory)
        }
        assert own and all(t.side == sub_type for t in own.values()), sub_type
        for batch in batches:
            assert batch.side == sub_type and batch.d == D
            assert len(batch.sample_ids) == B * K * D == len(batch.advantages), (sub_type, len(batch.sample_ids))
            real = [sid.split("/")[3].split("#")[0] for sid, w in zip(batch.sample_ids, batch.weights) if w > 0]
            assert real and set(real) <= set(own), (sub_type, real[:3])  # M delegated to this type
    calculator_turns = [
        t for t in read_stream(bus, bus.subjects.stream("traj-calculator")) if isinstance(t, Trajectory)
    ]
    assert all(t.findings and "=" in t.findings for t in calculator_turns if t.result_ok), calculator_turns[:2]


def test_each_types_advantages_follow_from_its_own_rewards(finished_run):
    bus, _ = finished_run
    for sub_type in TYPES:
        for batch in side_batches(bus, sub_type):
            for group in set(batch.groups.tolist()) - {-1}:
                members = (batch.groups == group) & (batch.weights > 0)
                rewards = batch.rewards[members].astype(np.float64)
                std = rewards.std()
                expected = np.zeros_like(rewards) if std <= 1e-6 else (rewards - rewards.mean()) / std
                np.testing.assert_allclose(batch.advantages[members], expected, atol=1e-5, err_msg=sub_type)


def _received(tmp: Path, node: str) -> list[dict]:
    return [json.loads(line) for line in (tmp / "deliveries" / f"{node}.jsonl").read_text().splitlines()]


def test_each_learner_received_only_its_own_sides_batches(finished_run):
    _, tmp = finished_run
    for side in SIDES:
        received = _received(tmp, f"{side}-learner")
        assert any(r["type"] == "AlignedBatch" for r in received), side
        assert all(r["type"] in ("AlignedBatch", "NodePing") for r in received), (side, received[:3])
        assert all(r["side"] in (None, side) for r in received), side


def test_only_subtask_text_and_scalar_statistics_cross_between_any_two_sides(finished_run):
    _, tmp = finished_run
    from_main = {"SubtaskRequest", "RewardStats"}  # what a sub-agent type's side gets from the main side
    from_types = {"SubtaskResult"}  # what the main side gets from a type's side
    neutral = {"StepPlan", "ToolResult", "NodePing", "Event"}
    own = {"Trajectory", "AlignedBatch", "WeightsVersion"}  # the side's own (checked: of this side)
    crossed = dict.fromkeys(SIDES, 0)
    for side in SIDES:
        allowed = (from_types | {"RolloutRequest"}) if side == "main" else from_main
        for node in NODES_OF[side]:
            for record in _received(tmp, node):
                assert record["type"] in allowed | neutral | own, (node, record)
                assert record["side"] in (None, side), (node, record)  # never another side's trajectory or batch
                crossed[side] += record["type"] in (from_types if side == "main" else from_main)
    assert all(crossed.values()), crossed
    print(f"messages that crossed into each side: {crossed}")


def _metric_total(bus, name: str) -> float:  # noqa: ANN001
    metrics = read_stream(bus, bus.subjects.stream("metrics"), subject=bus.subjects.metrics(name))
    return sum(m.value for m in metrics if isinstance(m, Metric))


def test_killing_one_types_sub_agent_mid_step_completes_the_step_with_counted_retries(nats_server, tmp_path):
    from mgrpo_actors.runtime import Bus

    run_id = "sub-types-kill"
    config = two_type_config(
        tmp_path, run_id, (B, K, D, STEPS), pipeline={"steps": 1, "subtask_timeout_s": 6, "tool_timeout_s": 3}
    )
    bus = Bus(nats_server.url, run_id=run_id, node="test", sub_types=TYPES).connect()
    events = EventLog(bus)
    nodes = NodeProcesses(nats_server.url, config, tmp_path / "logs")
    slow = {"MGRPO_TEST_POLICY_DELAY_S": "0.7"}  # a calculator episode takes ~1.5 s: long enough to be killed in
    try:
        nodes.start("tool", "tool")
        nodes.start("aligners", "main-aligner", "sub-aligner")  # one process, an aligner per type
        nodes.start("searcher-agent", "sub-agent", extra=("--sub-type", "searcher"))
        calculators = ("calculator-agent-1", "calculator-agent-2")
        for name in calculators:
            nodes.start(name, "sub-agent", env=slow, extra=("--sub-type", "calculator"))
        nodes.start("main-agent", "main-agent")
        nodes.start("controller", "controller")

        def working_calculator() -> str | None:  # the two share the type's work: either may take the first subtask
            return next(
                (n for n in calculators if any(r["type"] == "SubtaskRequest" for r in received(deliveries, n))), None
            )

        deliveries = tmp_path / "deliveries"
        victim = wait_until(working_calculator, timeout_s=120, what=lambda: nodes.output("main-agent")[-2000:])
        nodes.procs[victim].send_signal(signal.SIGKILL)
        print(f"killed {victim}, which had taken a subtask")
        events.wait_for("run.finished", timeout_s=150, describe=lambda: nodes.tails())
        for sub_type in TYPES:
            assert [len(b.sample_ids) for b in side_batches(bus, sub_type)] == [B * K * D], sub_type
        retries = _metric_total(bus, "main_agent.subtask.retries")
        failures = _metric_total(bus, "main_agent.subtask.failures")
        print(f"subtask retries after the kill: {retries:g}, subtasks failed after retries: {failures:g}")
        assert retries >= 1 and failures == 0
        assert _metric_total(bus, "main.failed") == 0
    finally:
        codes = nodes.stop_all()
        bus.close()
    assert codes[victim] == -signal.SIGKILL
    assert all(code == 0 for name, code in codes.items() if name != victim), codes
