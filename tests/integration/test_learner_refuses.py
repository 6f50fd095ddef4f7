"""A learner trains only on batches its aligner could have built (issue: "batches are not checked"; learner/
batch_checks.py). On a real nats-server, `mgrpo-node --role main-learner` is sent a forged batch for step 0 (4
samples where B·K = 6 are due, one advantage 1e6): it is dead-lettered with the reason, nothing is trained and the
learner stays up; the step's real batch, arriving after it, is applied."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mgrpo_actors.algo.advantages import group_advantages
from mgrpo_actors.algo.config import AdvantageConfig
from mgrpo_actors.alignment.batch_rows import rows_to_batch
from mgrpo_actors.models.loader import load_model
from protocols import DeadLetter, Event
from tests.integration.test_learner_ranks import _row
from tests.pipeline_helpers import EventLog, NodeProcesses, pipeline_config, read_stream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _batch(run_id: str, rewards: list[list[float]], forged_advantage: float | None = None):  # noqa: ANN202
    model = load_model("tiny:main")[0]
    rng = np.random.default_rng(3)
    rows = []
    for g, values in enumerate(rewards):
        adv = group_advantages(np.array([values]), np.ones((1, len(values)), dtype=bool), AdvantageConfig())[0]
        for i, reward in enumerate(values):
            row = _row(model, rng, f"q{g}/a/r{i}", float(adv[i]))
            rows.append(dataclasses.replace(row, reward=reward, group=g))
    if forged_advantage is not None:
        rows[0] = dataclasses.replace(rows[0], advantage=forged_advantage)
    return rows_to_batch(run_id, "main", 0, f"{run_id}-main-step0", rows)


def test_a_forged_batch_is_dead_lettered_and_the_real_one_trained_on(nats_server, tmp_path, make_bus, run_id):
    bus = make_bus("test")
    events = EventLog(bus)
    config = pipeline_config(tmp_path, run_id, learners={"main": {"lr": 1e-3, "checkpoint_every": 0}})
    nodes = NodeProcesses(nats_server.url, config, tmp_path / "logs")
    try:
        nodes.start("learner", "main-learner")
        events.wait_for("node.started", timeout_s=90, describe=lambda: nodes.output("learner")[-2000:])
        forged = _batch(run_id, [[1.0, 0.0], [0.5, 0.5]], forged_advantage=1e6)  # 4 samples, B·K = 3 × 2 due
        bus.js_publish(bus.subjects.batches("main"), forged, msg_id="forged#0")
        refused = events.wait_for("main.refused", timeout_s=60, describe=lambda: nodes.output("learner")[-2000:])
        assert "4 samples where the step requires B·K = 6" in refused.message, refused.message
        real = _batch(run_id, [[1.0, 0.0], [0.5, 0.5], [0.2, 0.8]])
        bus.js_publish(bus.subjects.batches("main"), real, msg_id="real#0")
        learned = events.wait_for("main.learned", timeout_s=60, describe=lambda: nodes.output("learner")[-2000:])
        bus.publish(bus.subjects.events, Event(kind="run.finished", message="test over"))
    finally:
        codes = nodes.stop_all()
    assert codes == {"learner": 0}, nodes.output("learner")[-3000:]
    assert learned.data["step"] == 0 and learned.data["samples"] == 4 and learned.data["version"] == 1
    assert abs(learned.data["loss"]) < 10  # the forged advantage never reached the loss
    letters = [m for m in read_stream(bus, bus.subjects.stream("dlq")) if isinstance(m, DeadLetter)]
    assert [letter.error_type for letter in letters] == ["BatchCheck"], letters
    assert "refused: 4 samples where the step requires B·K = 6" in letters[0].reason
    assert len([e for e in events.kinds("main.learned")]) == 1
