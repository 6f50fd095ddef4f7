"""The controller's stall watchdog on a real nats-server with a real `mgrpo-node` (docs/architecture.md §Errors):
a step whose batches are out but whose learners never run (learners that train, no learner role started) is
reported (log, `step.stalled` event, `controller.stalled_s` metric, naming the learners it waits for) and the run
stops with exit 3 and one line saying why, within stall_timeout_s plus slack; with the watchdog off (stall_timeout_s
0) the same run would wait for its learners for ever."""

from __future__ import annotations

import time

import pytest

from actors.controller import STEP_STALLED
from protocols import Metric
from tests.pipeline_helpers import EventLog, NodeProcesses, pipeline_config, read_stream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

STALL_S = 3.0
# Both aligners give up on the rollouts (no agent runs) after ROLLOUT_S and publish what arrived: nothing, as
# failed rollouts. Until then the watchdog allows STALL_S + ROLLOUT_S; after, STALL_S of quiet.
ROLLOUT_S = 1.0


def test_learners_that_never_answer_stop_the_run_with_exit_3_naming_them(nats_server, tmp_path, make_bus, run_id):
    bus = make_bus("test")
    events = EventLog(bus)
    config = pipeline_config(
        tmp_path,
        run_id,
        pipeline={
            "steps": 1,
            "advance_on": "learners",
            "rollout_timeout_s": ROLLOUT_S,
            "stall_timeout_s": STALL_S,
            "tick_s": 0.5,
        },
        learners={"main": {"frozen": False}, "sub": {"frozen": False}},  # both train, and no learner is started
    )
    nodes = NodeProcesses(nats_server.url, config, tmp_path / "logs")
    try:
        node = nodes.start("core", "controller", "main-aligner", "sub-aligner", extra=("--until-finished",))
        events.wait_for("step.started", timeout_s=60, describe=lambda: nodes.output("core")[-3000:])
        started = time.monotonic()
        code = node.wait(timeout=STALL_S + ROLLOUT_S + 30)
        waited = time.monotonic() - started
    finally:
        nodes.stop_all()
    output = nodes.output("core")
    print(
        f"the stalled run's node exited {waited:.1f} s after its step started ({ROLLOUT_S:g} s until the aligners "
        f"gave up, {STALL_S:g} s of quiet, then the node's own stop)"
    )
    assert code == 3, output[-3000:]
    assert STALL_S <= waited < STALL_S + ROLLOUT_S + 20, output[-3000:]
    last_line = output.strip().splitlines()[-1]
    assert last_line.startswith("mgrpo-node: error: run stopped: step 0 stalled"), last_line
    assert "waiting for main learner (StepDone), sub learner (StepDone)" in last_line, last_line
    assert '"event": "step stalled: stopping the run"' in output and '"waiting_for": "main learner' in output
    # the event and the metric, on the bus as they happened and in the run's metrics stream
    stalled = events.wait_for(STEP_STALLED, timeout_s=5)
    assert stalled.level == "error" and stalled.role == "controller" and stalled.data["step"] == 0
    assert stalled.data["waiting_for"] == "main learner (StepDone), sub learner (StepDone)"
    assert stalled.data["stalled_s"] >= STALL_S and stalled.data["limit_s"] == STALL_S  # both batches were out
    assert events.kinds("main.batch") and events.kinds("sub.batch")  # the aligners did their part
    assert not events.kinds("run.finished")
    metrics = read_stream(bus, bus.subjects.stream("metrics"), subject=bus.subjects.metrics("controller.stalled_s"))
    assert [m.value >= STALL_S for m in metrics if isinstance(m, Metric)] == [True]
