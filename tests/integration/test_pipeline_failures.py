"""The pipeline when things go wrong, with real processes on a real nats-server: a sub-agent process and
a tool process killed (SIGKILL) in the middle of a step, and a malformed message on every pipeline
subject. The step completes with exact batches either way; retries and dead letters are counted."""

from __future__ import annotations

import signal

import msgpack
import pytest

from mgrpo_actors.runtime import RemoteFailure
from protocols import DeadLetter, Metric, NodePing
from tests.helpers import wait_until
from tests.pipeline_helpers import EventLog, NodeProcesses, pipeline_config, read_stream, received, side_batches

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

B, K, D = 3, 2, 2


def _batch_sizes(bus) -> dict[str, list[int]]:
    sizes = {}
    for side in ("main", "sub"):
        sizes[side] = [len(b.sample_ids) for b in side_batches(bus, side)]
    return sizes


def _metric_total(bus, name: str) -> float:
    metrics = read_stream(bus, bus.subjects.stream("metrics"), subject=bus.subjects.metrics(name))
    return sum(m.value for m in metrics if isinstance(m, Metric))


def test_killing_a_sub_agent_and_a_tool_process_mid_step_loses_nothing(nats_server, tmp_path, make_bus, run_id):
    bus = make_bus("test")
    events = EventLog(bus)
    config = pipeline_config(tmp_path, run_id, pipeline={"steps": 1, "subtask_timeout_s": 6, "tool_timeout_s": 3})
    nodes = NodeProcesses(nats_server.url, config, tmp_path / "logs")
    slow = {"MGRPO_TEST_POLICY_DELAY_S": "0.7"}  # a sub-agent episode takes ~2 s: long enough to be killed in
    try:
        for name, roles in {"tool-1": ["tool"], "tool-2": ["tool"], "core": ["main-aligner", "sub-aligner"]}.items():
            nodes.start(name, *roles)
        victim = nodes.start("sub-agent-1", "sub-agent", env=slow)
        nodes.start("sub-agent-2", "sub-agent", env=slow)
        nodes.start("main-agent", "main-agent")
        nodes.start("controller", "controller")
        deliveries = tmp_path / "deliveries"
        wait_until(
            lambda: any(r["type"] == "SubtaskRequest" for r in received(deliveries, "sub-agent-1")),
            timeout_s=120,
            what=lambda: nodes.output("main-agent")[-2000:],
        )
        victim.send_signal(signal.SIGKILL)
        nodes.procs["tool-1"].send_signal(signal.SIGKILL)
        events.wait_for("run.finished", timeout_s=150, describe=lambda: nodes.output("core")[-3000:])
        assert _batch_sizes(bus) == {"main": [B * K], "sub": [B * K * D]}
        retries = _metric_total(bus, "main_agent.subtask.retries")
        failures = _metric_total(bus, "main_agent.subtask.failures")
        print(f"subtask retries after the kill: {retries:g}, subtasks failed after retries: {failures:g}")
        assert retries >= 1 and failures == 0
        assert _metric_total(bus, "main.failed") == 0 and _metric_total(bus, "sub.failed_rollouts") == 0
    finally:
        codes = nodes.stop_all()
    assert codes["sub-agent-1"] == -signal.SIGKILL and all(
        code == 0 for name, code in codes.items() if name not in ("sub-agent-1", "tool-1")
    ), codes


# Each pipeline subject and what listens there; core NATS subjects answer the requester with a Failure.
STREAM_SUBJECTS = (
    "rollout_requests",
    "step_start",
    "reward_stats",
    "traj-main",
    "traj-sub",
    "aligned-main",
    "aligned-sub",
)
CORE_SUBJECTS = ("subtask_requests", "tool-search", "tool-visit", "query_done")


def _subject(subjects, what: str) -> str:
    special = {
        "traj-main": subjects.trajectories("main"),
        "traj-sub": subjects.trajectories("sub"),
        "aligned-main": subjects.step_aligned("main"),
        "aligned-sub": subjects.step_aligned("sub"),
        "tool-search": subjects.tool("search"),
        "tool-visit": subjects.tool("visit"),
    }
    return special.get(what) or getattr(subjects, what)


def test_a_malformed_message_on_every_pipeline_subject_is_dead_lettered_and_the_step_completes(
    nats_server, tmp_path, make_bus, run_id
):
    bus = make_bus("test")
    events = EventLog(bus)
    subjects = bus.subjects
    bus.ensure_streams()
    garbage = {
        what: (b"\xc1 not msgpack" if i % 2 == 0 else msgpack.packb({"v": 1, "t": "NodePing", "d": {"requester": 7}}))
        for i, what in enumerate(STREAM_SUBJECTS + CORE_SUBJECTS)
    }
    for what in STREAM_SUBJECTS:  # waiting in the streams before any consumer starts
        bus.js_publish(_subject(subjects, what), garbage[what])
    bus.js_publish(subjects.trajectories("main"), NodePing(requester="wrong type on a trajectory stream"))
    config = pipeline_config(tmp_path, run_id, pipeline={"steps": 2})
    nodes = NodeProcesses(nats_server.url, config, tmp_path / "logs")
    try:
        nodes.start("all", "all", env={"MGRPO_TEST_POLICY_DELAY_S": "0.3"})
        events.wait_for("node.started", timeout_s=120, describe=lambda: nodes.output("all")[-2000:])
        for what in CORE_SUBJECTS:
            subject = _subject(subjects, what)
            if what == "query_done":
                bus.publish(subject, garbage[what])
                continue
            with pytest.raises(RemoteFailure):  # the requester learns at once why, instead of timing out
                bus.request(subject, garbage[what], timeout_s=10)
        events.wait_for("run.finished", timeout_s=150, describe=lambda: nodes.output("all")[-3000:])
        assert _batch_sizes(bus) == {"main": [B * K, B * K], "sub": [B * K * D, B * K * D]}
        letters = [m for m in read_stream(bus, subjects.stream("dlq")) if isinstance(m, DeadLetter)]
        by_subject = {letter.subject: letter for letter in letters}
        for what in STREAM_SUBJECTS + CORE_SUBJECTS:
            letter = by_subject.get(_subject(subjects, what))
            assert letter is not None and letter.reason, (what, sorted(by_subject))
        print(f"dead letters: {len(letters)} on {len(by_subject)} subjects")
    finally:
        codes = nodes.stop_all()
    assert codes == {"all": 0}, nodes.output("all")[-3000:]


def test_a_killed_controller_and_sub_aligner_resume_from_kv_without_doing_anything_twice(
    nats_server, tmp_path, make_bus, run_id
):
    bus = make_bus("test")
    events = EventLog(bus)
    config = pipeline_config(tmp_path, run_id, pipeline={"steps": 3})
    nodes = NodeProcesses(nats_server.url, config, tmp_path / "logs")
    slow = {"MGRPO_TEST_POLICY_DELAY_S": "0.3"}
    try:
        nodes.start("tools", "tool")
        nodes.start("agents", "sub-agent", "main-agent", env=slow)
        nodes.start("main-aligner", "main-aligner")
        nodes.start("sub-aligner", "sub-aligner")
        nodes.start("controller", "controller")
        events.wait_for("step.finished", timeout_s=120, describe=lambda: nodes.output("controller")[-2000:])
        for name in ("controller", "sub-aligner"):
            nodes.procs[name].send_signal(signal.SIGKILL)
            nodes.procs[name].wait()
        nodes.start("sub-aligner", "sub-aligner")  # same durable consumers: they pick up what was unacked
        nodes.start("controller", "controller")  # reads its cursor from KV
        events.wait_for("run.finished", timeout_s=150, describe=lambda: nodes.output("controller")[-3000:])
        assert _batch_sizes(bus) == {"main": [B * K] * 3, "sub": [B * K * D] * 3}
        finished = sorted(e.data["step"] for e in events.kinds("step.finished"))
        assert finished == [0, 1, 2], finished  # no step twice, none skipped
        # after the end: it says so, and stops
        late = nodes.start("late-controller", "controller", extra=("--until-finished",))
        assert late.wait(timeout=60) == 0, nodes.output("late-controller")[-2000:]
    finally:
        codes = nodes.stop_all()
    assert all(code == 0 for code in codes.values()), codes
