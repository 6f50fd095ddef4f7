"""`mgrpo bench steps`: make run-tiny's job in this process with the phase recorder on, each step's wall
time split by what the process was doing."""

from __future__ import annotations

import pytest
from rich.console import Console

from actors.cli import COMPOSITION
from mgrpo_actors import phases
from mgrpo_actors.bench.step_split import CATEGORIES
from mgrpo_actors.bench.steps import measure, print_results

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_two_steps_of_the_tiny_job_split_into_categories_that_add_up():
    results = measure(COMPOSITION, steps=2)
    assert results["exit_code"] == 0
    assert phases.recorder() is None  # recording is off again afterwards
    splits = results["splits"]
    assert [s.step for s in splits] == [0, 1]
    kinds = {i.kind for i in results["intervals"]}
    assert {"generate", "weights", "checkpoint", "align", "learn"} <= kinds  # every instrumented place was hit
    for split in splits:
        assert split.wall > 0
        assert all(split.seconds[c] >= 0 for c in CATEGORIES)
        assert sum(split.seconds.values()) == pytest.approx(split.wall, abs=1e-6)
        assert split.seconds["generate"] > 0  # the rollouts ran on the engines
        assert 0 <= split.non_compute_share <= 1
    assert results["mean"] is not None and results["mean"].step == -1
    console = Console(record=True, width=100)
    print_results(results, console)
    text = console.export_text()
    assert "mean 1 " in text and "not model compute:" in text and "target ≤ 10%" in text
