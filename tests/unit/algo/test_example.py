"""The worked example runs, matches what the docs quote, and the quick benchmark runs."""

import subprocess
import sys

from mgrpo_actors.algo import example
from mgrpo_actors.bench import algo as bench_algo
from tests.helpers import REPO

DOC = REPO / "docs" / "m-grpo-worked-example.md"


def test_example_module_runs_and_shows_the_issue_case():
    out = subprocess.run(
        [sys.executable, "-m", "mgrpo_actors.algo.example"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "A_M over the K = 3 rollouts (mean 0.700, population std 0.424)" in out
    assert "B·K·D = 1·3·2 = 6 samples: 4 original, 0 duplicate, 2 placeholder; 3 dropped" in out
    assert "B·K·D = 1·3·3 = 9 samples: 5 original, 1 duplicate, 3 placeholder; 2 dropped" in out


def test_docs_quote_the_current_output():
    assert example.render() in DOC.read_text(encoding="utf-8"), (
        "docs/m-grpo-worked-example.md no longer quotes `python -m mgrpo_actors.algo.example`; rerun and paste"
    )


def test_quick_bench_reports_algo_far_below_a_forward():
    result = bench_algo.run(quick=True)
    assert result["samples"] == result["queries"] * result["k"] * result["d"]
    for key in ("align_s", "advantages_s", "algo_s", "forward_measured_s", "forward_all_samples_s"):
        assert result[key] > 0.0
    assert result["algo_s"] < result["forward_all_samples_s"]
