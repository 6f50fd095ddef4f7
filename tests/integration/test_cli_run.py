"""`mgrpo run` (what `make run` does) as a real subprocess, with the tiny models so it takes seconds."""

from __future__ import annotations

import pytest

from tests.helpers import expected_trained_line, run_script, stored_messages

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_mgrpo_run_runs_the_pipeline_and_both_learners_over_nats():
    # warmup.steps 1: the supervised warm start, built into the model cache on first use, reused after
    done = run_script(
        *("mgrpo", "run", "--main", "tiny:main", "--sub", "tiny:sub", "--set", "tools.web_entities=150"),
        *("--set", "warmup.steps=1", "--set", "warmup.questions=4"),
        timeout_s=230,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    flat = " ".join(out.split())  # rich may wrap long lines
    assert "warm start built in" in flat or "warm start reused from" in flat
    assert "1 supervised step, loss main" in flat and "RL starts from it" in flat
    assert "run 'default' (m-grpo): M " in flat and "/warmups/m-grpo-" in flat.split("run 'default'")[1]
    assert "roles on an embedded nats-server" in out
    for step in (0, 1):
        assert f"step {step}: 2 queries × 2 rollouts" in out and f"step {step} finished in" in out
    assert out.count("main batch: 4 samples") == 2  # B·K with B = K = 2
    assert out.count("sub batch: 32 samples (D = 8)") == 2  # B·K·D
    assert "run default finished after 2 steps" in out
    assert "main learner: version 1, loss" in out and "sub learner: version 2, loss" in out
    assert expected_trained_line(flat, ("main", "sub"), ("main", "sub")) in flat


def test_mgrpo_run_rejects_an_unknown_config_key():
    done = run_script("mgrpo", "run", "--set", "tools.nope=1", timeout_s=60)
    assert done.returncode == 2 and "tools.nope" in done.stderr


@pytest.mark.timeout(300)
def test_a_resumed_run_reports_the_whole_run(tmp_path):
    """`mgrpo run --resume` after kill -9 of the run (its embedded nats-server with it) after step 1: the resumed
    view reads the earlier steps back from the run's metrics stream, so its tables, summary.json and closing line
    cover all 3 steps, not only the resumed one. With nats.keep_consumed_steps 0 every step's consumed work leaves
    the streams (runtime/retention.py), across the kill too: each step is still applied exactly once, and at the
    end the work streams hold at most the last step's messages."""
    import json
    import os
    import signal
    import subprocess
    import time

    from tests.helpers import REPO, subprocess_env, venv_script

    args = [
        *("--main", "tiny:main", "--sub", "tiny:sub"),
        *("--set", "tools.web_entities=150", "--set", "pipeline.steps=3", "--set", "pipeline.ack_wait_s=5"),
        *("--set", f"run.dir={tmp_path / 'runs'}", "--set", "run.id=resumed", "--set", "nats.keep_consumed_steps=0"),
    ]
    log = tmp_path / "first.log"
    with open(log, "w") as out:
        first = subprocess.Popen(
            [str(venv_script("mgrpo")), "run", *args],
            cwd=REPO,
            env=subprocess_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the embedded nats-server dies with it
        )
        deadline = time.monotonic() + 200
        while "step 1 finished in" not in log.read_text() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert "step 1 finished in" in log.read_text() and "step 2 finished in" not in log.read_text(), log.read_text()
    done = run_script("mgrpo", "run", *args, "--resume", timeout_s=230)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resumed: 2 finished steps read back from the run's metrics stream" in done.stdout
    summary = json.loads((tmp_path / "runs" / "resumed" / "summary.json").read_text())
    assert [row["step"] for row in summary["steps"]] == [0, 1, 2], summary["steps"]
    assert [row["main_version"] for row in summary["steps"]] == [1.0, 2.0, 3.0]
    for row in summary["steps"]:  # per question: [correct, rollouts], B = K = 2; together M's correct rate
        counts = list(row["questions"].values())
        assert len(counts) == 2 and sum(n for _, n in counts) == 4, row["questions"]
        assert sum(c for c, _ in counts) / 4 == pytest.approx(row["main_correct"]), row
    # B = K = 2, D = 8: a step publishes 4 main trajectories, 4 reward reports, up to 32 sub trajectories and one
    # batch per side (one chunk); 3 steps published three times that, of which at most the last step's stays.
    stored = stored_messages(tmp_path / "runs" / "resumed")
    assert stored["traj-main"] <= 4 and stored["stats"] <= 4 and stored["traj-sub"] <= 32, stored
    assert stored["batch-main"] <= 1 and stored["batch-sub"] <= 1, stored
    assert stored["metrics"] > 0 and stored["steps"] > 0, stored  # watching streams and plans keep theirs
