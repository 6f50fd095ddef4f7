"""`mgrpo run` with both agents on the vllm engine (vLLM's CPU build): 2 steps, every role and both learners over
NATS; each agent's engine takes its learner's new weights between steps (weights/sync.py), and the program exits
once the run is over (vLLM's engine core processes stopped, mgrpo_actors/engines/vllm.py `_stop_at_exit`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, expected_trained_line, subprocess_env
from tests.vllm.conftest import DEVICE

RUN_TIMEOUT_S = 600  # measured here: about 140 s for the run (two vLLM engines start, ~17 s each), 5 s to exit
pytestmark = pytest.mark.timeout(RUN_TIMEOUT_S + 120)


def test_a_two_step_run_with_both_agents_on_vllm(tmp_path):
    mgrpo = Path(sys.executable).parent / "mgrpo"  # this venv's, not the main one (tests/helpers.py prefers .venv)
    command = [str(mgrpo), "run", "--main", "tiny:main32", "--sub", "tiny:sub64", "--set", "tools.web_entities=150"]
    for agent in ("main", "sub"):
        command += ["--set", f"agents.{agent}.engine=vllm"]
        command += ["--set", f"agents.{agent}.device={DEVICE}"] if DEVICE else []
    command += ["--set", f"run.dir={tmp_path / 'runs'}"]
    log = tmp_path / "run.log"
    # Output to a file and a session of its own: a run that hangs still shows its output, and is ended with
    # every process it started (vLLM's engine cores and workers), none left behind.
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=subprocess_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )
        try:
            returncode = process.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            pytest.fail(f"mgrpo run did not exit in {RUN_TIMEOUT_S} s; its output ends:\n{log.read_text()[-5000:]}")
    output = log.read_text()
    assert returncode == 0, output[-8000:]
    assert "run 'default' (m-grpo): M tiny:main32, S tiny:sub64" in output
    for step in (0, 1):
        assert f"step {step}: 2 queries × 2 rollouts" in output and f"step {step} finished in" in output
    assert "run default finished after 2 steps" in output
    assert "main learner: version 1, loss" in output and "sub learner: version 2, loss" in output
    flat = " ".join(output.split())  # rich may wrap the closing line
    assert expected_trained_line(flat, ("main", "sub"), ("main", "sub")) in flat
