"""`mgrpo run` (what `make run` does) as a real subprocess, with the tiny models so it takes seconds."""

from __future__ import annotations

import pytest

from tests.helpers import run_script

pytestmark = pytest.mark.integration


def test_mgrpo_run_checks_the_bus_rolls_out_over_nats_and_says_training_is_missing():
    done = run_script("mgrpo", "run", "--main", "tiny:main", "--sub", "tiny:sub", "--k", "2", "--set", "tools.web_entities=150", timeout_s=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "embedded nats-server at nats://127.0.0.1:" in out
    assert "end-to-end check over NATS" in out and "search(" in out and "visit(" in out
    assert "rollout 0" in out and "rollout 1" in out  # K = 2 rollouts, transcript printed
    assert "R_M" in out  # the reward table
    assert "dead letters on the bus: 0" in out
    assert "Training not run" in out and "main-learner" in out


def test_mgrpo_run_rejects_an_unknown_config_key():
    done = run_script("mgrpo", "run", "--set", "tools.nope=1", timeout_s=60)
    assert done.returncode == 2 and "tools.nope" in done.stderr
