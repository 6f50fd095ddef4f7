"""Both learners in the pipeline, every role its own process on a real nats-server (DeepSpeed ZeRO-2 on
CPU, tiny models under the rule policy), 3 synchronous steps: each learner applies its side's batches in
order, both models' weights change, the engines roll each step out with the previous step's weights,
and no learner receives anything of the other side."""

from __future__ import annotations

import json
import signal

import pytest
import torch

from mgrpo_actors.config.learner import WeightsConfig
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.weights.chain import rebuild
from mgrpo_actors.weights.store import WeightsStore
from mgrpo_actors.weights.sync import latest_key
from protocols import StepDone, Trajectory, WeightsVersion, decode
from tests.helpers import wait_until
from tests.pipeline_helpers import EventLog, NodeProcesses, pipeline_config, read_stream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

STEPS = 3
TOPOLOGY = [
    "tool",
    "sub-agent",
    "main-agent",
    "main-aligner",
    "sub-aligner",
    "main-learner",
    "sub-learner",
    "controller",
]


def _run_to_the_end(url: str, config, tmp_path, events: EventLog) -> None:  # noqa: ANN001
    """Every role of TOPOLOGY its own process until the run is finished; each exits 0."""
    nodes = NodeProcesses(url, config, tmp_path / "logs")
    try:
        for role in TOPOLOGY:
            nodes.start(role, role)
        events.wait_for(
            "run.finished", timeout_s=300, describe=lambda: "\n".join(nodes.output(r)[-1500:] for r in TOPOLOGY)
        )
    finally:
        codes = nodes.stop_all()
    assert all(code == 0 for code in codes.values()), codes


def test_three_synchronous_steps_train_both_agents_on_their_own_side_only(nats_server, tmp_path, make_bus, run_id):
    bus = make_bus("test")
    events = EventLog(bus)
    learner = {"lr": 1e-2, "zero_stage": 2, "micro_batch_samples": 4}
    config = pipeline_config(
        tmp_path,
        run_id,
        pipeline={"steps": STEPS, "advance_on": "learners"},
        learners={"main": learner, "sub": learner},
    )
    _run_to_the_end(nats_server.url, config, tmp_path, events)

    done = [m for m in read_stream(bus, bus.subjects.stream("steps")) if isinstance(m, StepDone)]
    for side in ("main", "sub"):
        mine = [d for d in done if d.side == side]
        # every step once, in order
        assert [(d.step, d.version) for d in mine] == [(s, s + 1) for s in range(STEPS)], mine

    # Sync mode: step n is rolled out by the policy of version n (the weights of step n - 1).
    for side in ("main", "sub"):
        trajectories = [t for t in read_stream(bus, bus.subjects.stream(f"traj-{side}")) if isinstance(t, Trajectory)]
        assert {(t.step, t.policy_version) for t in trajectories} == {(s, s) for s in range(STEPS)}, side

    # The weights changed: the last version (a delta: version 1 was the full snapshot) rebuilt from the side's
    # object store differs from the initial model on both sides.
    for side, spec in (("main", "tiny:main"), ("sub", "tiny:sub")):
        latest = decode(bus.kv(bus.subjects.bucket(f"versions-{side}")).get(latest_key(side)))
        assert isinstance(latest, WeightsVersion) and (latest.version, latest.base) == (STEPS, STEPS - 1), latest
        final = rebuild(WeightsStore(bus, side, WeightsConfig(), tmp_path / f"{side}-final"), latest)
        initial = load_model(spec)[0].state_dict()
        moved = [name for name, tensor in final.items() if not torch.allclose(tensor, initial[name])]
        assert len(moved) > len(final) // 2, (side, len(moved), len(final))

    # The learners received only their own side's batches.
    for side, other in (("main", "sub"), ("sub", "main")):
        received = [
            json.loads(line) for line in (tmp_path / "deliveries" / f"{side}-learner.jsonl").read_text().splitlines()
        ]
        assert received and all(r["type"] in ("AlignedBatch", "NodePing") for r in received), received[:3]
        assert all(r["side"] in (None, side) for r in received) and not any(r["side"] == other for r in received)


def test_a_learner_killed_mid_run_resumes_from_its_checkpoint_applying_every_batch_once(
    nats_server, tmp_path, make_bus, run_id
):
    bus = make_bus("test")
    events = EventLog(bus)
    steps = 4
    learner = {"lr": 1e-2, "checkpoint_every": 1}
    config = pipeline_config(
        tmp_path,
        run_id,
        pipeline={"steps": steps, "advance_on": "learners"},
        learners={"main": learner, "sub": learner},
    )
    nodes = NodeProcesses(nats_server.url, config, tmp_path / "logs")
    slow = {"MGRPO_TEST_POLICY_DELAY_S": "0.2"}
    try:
        for role in TOPOLOGY:
            nodes.start(role, role, env=slow if role.endswith("agent") else None)
        wait_for_step = lambda: [e for e in events.kinds("sub.learned") if e.data["step"] >= 1]  # noqa: E731
        wait_until(wait_for_step, timeout_s=200, what=lambda: nodes.output("sub-learner")[-2000:])
        nodes.procs["sub-learner"].send_signal(signal.SIGKILL)
        nodes.procs["sub-learner"].wait()
        nodes.start("sub-learner", "sub-learner")  # resumes from <run dir>/checkpoints/sub
        events.wait_for("run.finished", timeout_s=250, describe=lambda: nodes.output("sub-learner")[-3000:])
    finally:
        codes = nodes.stop_all()
    assert all(code == 0 for code in codes.values()), codes
    for side in ("main", "sub"):
        ckpt = tmp_path / "runs" / run_id / "checkpoints" / side
        tag = (ckpt / "latest").read_text().strip()
        record = torch.load(ckpt / tag / "mp_rank_00_model_states.pt", weights_only=False)["record"]
        # 1..N once each
        assert record["history"] == [f"{run_id}-{side}-step{s}" for s in range(steps)], (side, record["history"])
        hf_model, _ = load_model(str(ckpt / tag / "hf"))  # a plain HF directory: transformers (and vLLM) load it
        assert sum(p.numel() for p in hf_model.parameters()) > 0
    done = [m for m in read_stream(bus, bus.subjects.stream("steps")) if isinstance(m, StepDone) and m.side == "sub"]
    assert [d.step for d in done] == list(range(steps))


def test_async_mode_runs_a_step_ahead_and_learners_apply_every_batch_in_order(nats_server, tmp_path, make_bus, run_id):
    bus = make_bus("test")
    events = EventLog(bus)
    steps = 4
    learner = {"lr": 1e-2, "checkpoint_every": 0}
    config = pipeline_config(
        tmp_path,
        run_id,
        pipeline={"steps": steps, "mode": "async", "max_staleness": 1, "advance_on": "learners"},
        learners={"main": learner, "sub": learner},
    )
    _run_to_the_end(nats_server.url, config, tmp_path, events)

    # The controller published step n + 1 before step n was finished (one step ahead), never two.
    order = [(e.kind, e.data["step"]) for e in events.events if e.kind in ("step.started", "step.finished")]
    started_at = {step: i for i, (kind, step) in enumerate(order) if kind == "step.started"}
    finished_at = {step: i for i, (kind, step) in enumerate(order) if kind == "step.finished"}
    assert sorted(started_at) == sorted(finished_at) == list(range(steps))
    assert started_at[1] < finished_at[0]
    assert all(started_at[s + 2] > finished_at[s] for s in range(steps - 2)), order

    # Each learner applied every step once, in order; samples were at most one version old, so none dropped.
    done = [m for m in read_stream(bus, bus.subjects.stream("steps")) if isinstance(m, StepDone)]
    for side in ("main", "sub"):
        assert [(d.step, d.version) for d in done if d.side == side] == [(s, s + 1) for s in range(steps)]
        trajectories = [t for t in read_stream(bus, bus.subjects.stream(f"traj-{side}")) if isinstance(t, Trajectory)]
        assert trajectories and all(t.step - 1 <= t.policy_version <= t.step for t in trajectories), (
            side,
            sorted({(t.step, t.policy_version) for t in trajectories}),
            [e.data for e in events.kinds("step.started")],
        )
        assert all(d.stats["stale_dropped"] == 0 and d.stats["staleness_max"] <= 1 for d in done if d.side == side), [
            (d.step, d.stats["stale_dropped"], d.stats["staleness_max"], d.stats["samples"])
            for d in done
            if d.side == side
        ]


def test_advance_on_batches_overlaps_learning_within_the_version_bound(nats_server, tmp_path, make_bus, run_id):
    """Sync mode, `advance_on: batches`: a step ends once its batches are out, yet step s starts only once both
    learners reached version s − max_staleness (controller/cursor.py), and each learner reports the staleness it
    saw: within the bound, nothing dropped."""
    bus = make_bus("test")
    events = EventLog(bus)
    learner = {"lr": 1e-2, "checkpoint_every": 0}
    steps = 3
    config = pipeline_config(
        tmp_path,
        run_id,
        pipeline={"steps": steps, "advance_on": "batches", "max_staleness": 1},
        learners={"main": learner, "sub": learner},
    )
    _run_to_the_end(nats_server.url, config, tmp_path, events)

    started = {e.data["step"]: e.data["versions"] for e in events.kinds("step.started")}
    assert sorted(started) == list(range(steps))
    # step s rolled out with versions >= s − 1 on both sides (the bound), never older
    assert all(started[s][side] >= s - 1 for s in range(steps) for side in ("main", "sub")), started
    done = [m for m in read_stream(bus, bus.subjects.stream("steps")) if isinstance(m, StepDone)]
    for side in ("main", "sub"):
        mine = [d for d in done if d.side == side]
        assert [(d.step, d.version) for d in mine] == [(s, s + 1) for s in range(steps)], mine
        assert all(d.stats["staleness_max"] <= 1 and d.stats["stale_dropped"] == 0 for d in mine), [
            (d.step, d.stats) for d in mine
        ]


def test_a_fresh_run_refuses_an_earlier_runs_checkpoints_under_its_id(nats_server, tmp_path, run_id):
    import subprocess
    import sys
    from pathlib import Path

    node = Path(sys.executable).parent / "mgrpo-node"
    tiny = [
        "--set",
        "agents.main.model=tiny:main",
        "--set",
        "agents.sub.model=tiny:sub",
        "--set",
        "tools.web_entities=150",
        "--set",
        "pipeline.steps=1",
    ]

    def job(rid: str) -> subprocess.CompletedProcess:
        command = [
            str(node),
            "--role",
            "all",
            "--nats",
            nats_server.url,
            "--run-id",
            rid,
            "--set",
            f"run.dir={tmp_path / 'runs'}",
            *tiny,
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=150)

    first = job(run_id)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (tmp_path / "runs" / run_id / "checkpoints" / "main" / "latest").exists()
    # The same run directory and id on a NATS store that never saw that run (here: a new run id's
    # streams would be fresh; a wiped server looks the same): its checkpoints are not this run's.
    (tmp_path / "runs" / "other").symlink_to(tmp_path / "runs" / run_id)
    second = job("other")
    assert second.returncode == 1
    assert "holds checkpoints of an earlier run" in second.stdout + second.stderr
