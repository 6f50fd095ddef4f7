"""Plain single-turn GRPO through the whole pipeline: `mgrpo run --config deploy/configs/grpo.yaml` in a
real process (controller, single agent, main aligner and main learner on an embedded nats-server; no
sub side, no tool actors) for 2 steps, and `mgrpo bench grpo --quick`, which times that job. Both run
the bench's model (tiny:grpo warmed up on the answer format; built once and cached), so rewards differ
within groups and the learner really takes its optimizer step."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mgrpo_actors.bench.grpo_model import bench_model_dir
from tests.helpers import expected_trained_line, run_script

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

B, K = 4, 8  # deploy/configs/grpo.yaml


def test_mgrpo_run_with_the_plain_grpo_config_trains_one_agent_on_b_times_k_completions(tmp_path: Path):
    model = bench_model_dir()
    done = run_script(
        "mgrpo",
        "run",
        "--config",
        "deploy/configs/grpo.yaml",
        "--main",
        str(model),
        "--set",
        "pipeline.steps=2",
        "--set",
        f"run.dir={tmp_path}",
        timeout_s=200,
    )
    out = " ".join(done.stdout.split())  # rich wraps long lines: compare on single spaces
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"run 'grpo' (single-agent): plain GRPO, one agent without tools, 1 turn, {model}" in out
    assert "roles on an embedded nats-server: main-aligner, main-agent, main-learner, controller 2 steps" in out
    assert out.count(f"main batch: {B * K} samples") == 2 and "sub batch" not in out
    trained = [
        int(n)
        for n in re.findall(r"main learner: version \d+, loss -?[\d.]+, clip fraction [\d.]+, (\d+) samples", out)
    ]
    assert len(trained) == 2 and sum(trained) > 0, out[-3000:]  # rewards differed: the learner stepped
    summary = json.loads((tmp_path / "grpo" / "summary.json").read_text())
    assert [row["main_version"] for row in summary["steps"]] == [1.0, 2.0]
    assert all(row["sub_version"] is None and row["main_tokens"] > 0 for row in summary["steps"])
    assert all(0 <= row["main_format_ok"] <= 1 for row in summary["steps"])
    assert expected_trained_line(out, ("main",), ("main",)) in out and "frozen" not in out


def test_mgrpo_bench_grpo_quick_prints_seconds_per_step_and_the_split():
    bench_model_dir()  # built here (once), not inside the timed command
    done = run_script("mgrpo", "bench", "grpo", "--quick", timeout_s=120)
    out = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (
        "4 prompts × 8 completions × ≤ 32 new tokens" in out
        and "Qwen2ForCausalLM, hidden 128, 4 layers, 4 heads" in out
    )
    assert "intermediate 384" in out and "KL coefficient 0" in out
    match = re.search(r"plain GRPO: (\d+\.\d{3}) s/step, ([\d.]+) generated tokens/s", out)
    assert match and float(match.group(1)) > 0 and float(match.group(2)) > 0, out[-2000:]
    for column in ("s/step", "tokens", "tok/s", "gen", "score", "learner", "msg", "trained"):
        assert column in out
    rows = re.findall(
        r"(\d)\*? (\d+\.\d{3}) (\d+) ([\d.]+) (\d+\.\d{3}) (\d+\.\d{3}) (\d+\.\d{3}) (\d+\.\d{3}) (\d+)", out
    )
    assert [row[0] for row in rows] == ["0", "1"], out[-2000:]
    for _, wall, _, _, *parts, _trained in rows:
        # the four groups add up to the step
        assert sum(float(p) for p in parts) == pytest.approx(float(wall), abs=0.004)
    assert int(rows[1][-1]) > 0  # the learner trained on step 1's batch
