"""`mgrpo run` (what `make run` does) as a real subprocess, with the tiny models so it takes seconds."""

from __future__ import annotations

import pytest

from tests.helpers import expected_trained_line, run_script

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_mgrpo_run_runs_the_pipeline_and_both_learners_over_nats():
    done = run_script(
        "mgrpo", "run", "--main", "tiny:main", "--sub", "tiny:sub", "--set", "tools.web_entities=150", timeout_s=230
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "run 'default' (m-grpo): M tiny:main, S tiny:sub" in out and "roles on an embedded nats-server" in out
    for step in (0, 1):
        assert f"step {step}: 2 queries × 2 rollouts" in out and f"step {step} finished in" in out
    assert out.count("main batch: 4 samples") == 2  # B·K with B = K = 2
    assert out.count("sub batch: 32 samples (D = 8)") == 2  # B·K·D
    assert "run default finished after 2 steps" in out
    assert "main learner: version 1, loss" in out and "sub learner: version 2, loss" in out
    flat = " ".join(out.split())  # rich may wrap the closing line
    assert expected_trained_line(flat, ("main", "sub"), ("main", "sub")) in flat


def test_mgrpo_run_rejects_an_unknown_config_key():
    done = run_script("mgrpo", "run", "--set", "tools.nope=1", timeout_s=60)
    assert done.returncode == 2 and "tools.nope" in done.stderr
