"""`mgrpo bench steps`: a job whose learners train every step (the colour-rule demo's, K = 8) in this
process with the phase recorder on, each step's wall time split by what the process was doing."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from actors.cli import COMPOSITION
from mgrpo_actors import phases
from mgrpo_actors.bench.step_split import CATEGORIES
from mgrpo_actors.bench.steps import measure, print_results, training_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]  # the demo's warmed-up models: built once


def test_two_steps_of_the_training_job_split_into_categories_that_add_up(tmp_path: Path):
    results = measure(COMPOSITION, steps=2, job=training_job(tmp_path))
    assert results["exit_code"] == 0
    assert phases.recorder() is None  # recording is off again afterwards
    splits = results["splits"]
    assert [s.step for s in splits] == [0, 1]
    kinds = {i.kind for i in results["intervals"]}
    assert {"generate", "weights", "align", "learn"} <= kinds  # every instrumented place the job has was hit
    assert results["config"].pipeline.rollouts_per_query == 8
    # both learners trained on every step (rewards differed within groups), so learn is real compute
    assert all(results["trained"].get(step, {}).get(side, 0) > 0 for step in (0, 1) for side in ("main", "sub"))
    for split in splits:
        assert split.wall > 0
        assert all(split.seconds[c] >= 0 for c in CATEGORIES)
        assert sum(split.seconds.values()) == pytest.approx(split.wall, abs=1e-6)
        assert split.seconds["generate"] > 0 and split.seconds["learn"] > 0  # engines and learners computed
        assert 0 <= split.non_compute_share <= 1
    assert results["mean"] is not None and results["mean"].step == -1
    console = Console(record=True, width=120)
    print_results(results, console)
    text = console.export_text()
    assert "mean 1 " in text and "not model compute:" in text and "target ≤ 5%" in text
    assert "M trained" in text and "S trained" in text
