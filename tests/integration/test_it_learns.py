"""It learns, end to end: two tiny models, warmed up on the turn format only, trained by M-GRPO through the
whole NATS pipeline (`mgrpo run`'s job: controller, main agent, sub-agent, tools, both aligners, both
DeepSpeed learners, weight sync back to the engines) on a rule they cannot know beforehand (the answer
is always "blue"; mgrpo_actors/demos/colour_rule.py). M goes from chance (1/4) to >= 0.9 correct; the
same run with every advantage's sign flipped does not. This catches sign, masking and weight-sync
errors unit tests miss. R_S carries M's correctness (β2; no expert judge), so S's reward rises with
M's; both learners must have applied every step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.demos.colour_rule import demo_config, warmed_models, write_questions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

STEPS = 12


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    main_dir, sub_dir = warmed_models(NodeConfig().tools)  # built once per machine, cached with the models
    return {
        "main": main_dir,
        "sub": sub_dir,
        "questions": write_questions(tmp_path_factory.mktemp("colour-rule") / "colours.jsonl"),
    }


def _run(task: dict, directory: Path, run_id: str, advantage_sign: int) -> list[dict]:
    config = {
        "run": {"id": run_id, "dir": str(directory / "runs"), "seed": 0},
        **demo_config(task["main"], task["sub"], task["questions"], STEPS, advantage_sign),
    }
    path = directory / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    mgrpo = Path(sys.executable).parent / "mgrpo"
    done = subprocess.run([str(mgrpo), "run", "--config", str(path)], capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((directory / "runs" / run_id / "summary.json").read_text())
    assert [row["step"] for row in summary["steps"]] == list(range(STEPS)), summary
    return summary["steps"]


def _mean(rows: list[dict], key: str) -> float:
    return sum(row[key] for row in rows) / len(rows)


def test_m_grpo_learns_the_rule_and_the_sign_flipped_control_does_not(task, tmp_path):
    learned = _run(task, tmp_path, "learns", advantage_sign=1)
    flipped = _run(task, tmp_path, "flipped", advantage_sign=-1)
    # step 0, before any update: chance (1/4)
    assert learned[0]["main_correct"] <= 0.5 and flipped[0]["main_correct"] <= 0.5
    last = learned[-3:]
    assert _mean(last, "main_correct") >= 0.9, [row["main_correct"] for row in learned]
    assert _mean(last, "main_reward_mean") >= 0.9
    assert _mean(last, "sub_reward_mean") > learned[0]["sub_reward_mean"]
    assert _mean(flipped[-3:], "main_correct") <= 0.3, [row["main_correct"] for row in flipped]
    for rows in (learned, flipped):  # both learners applied every step, so both engines got every version
        assert (
            [row["main_version"] for row in rows] == [row["sub_version"] for row in rows] == list(range(1, STEPS + 1))
        )
        assert _mean(rows, "sub_calls") > 0


def test_the_demo_command_runs_the_colour_rule(task, tmp_path):
    mgrpo = Path(sys.executable).parent / "mgrpo"
    done = subprocess.run(
        [str(mgrpo), "demo", "learn", "--steps", "2", "--run-id", "demo", "--set", f"run.dir={tmp_path / 'runs'}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the answer is always 'blue'" in done.stdout and "rewards.png" in done.stdout
    rows = json.loads((tmp_path / "runs" / "demo" / "summary.json").read_text())["steps"]
    assert [row["main_version"] for row in rows] == [1, 2]


def test_agents_of_different_families_and_tokenizers_train_together(tmp_path):
    """M is tiny:main (Llama, its own tokenizer), S is tiny:grpo (Qwen2, a byte-level BPE of 512 ids): only text
    crosses between them, so the run works as with one family, and both learners train on S's and M's own ids."""
    from mgrpo_actors.models.loader import load_model

    vocabularies = {spec: load_model(spec)[1].get_vocab() for spec in ("tiny:main", "tiny:grpo")}
    assert vocabularies["tiny:main"] != vocabularies["tiny:grpo"]
    mgrpo = Path(sys.executable).parent / "mgrpo"
    command = [str(mgrpo), "demo", "learn", "--sub", "tiny:grpo", "--steps", "2", "--run-id", "mixed"]
    done = subprocess.run(
        [*command, "--set", f"run.dir={tmp_path / 'runs'}"], capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "warming tiny:main and tiny:grpo" in done.stdout
    rows = json.loads((tmp_path / "runs" / "mixed" / "summary.json").read_text())["steps"]
    assert [row["main_version"] for row in rows] == [row["sub_version"] for row in rows] == [1, 2]
    assert all(row["sub_calls"] > 0 and row["main_format_ok"] > 0 for row in rows)
    # Near chance (1/4) M's groups differ in reward, and S's reward carries M's correctness: both learners step
    # (in one of the two steps at least: a step's 4 groups may all agree by chance).
    assert sum(row["main_samples"] for row in rows) > 0 and sum(row["sub_samples"] for row in rows) > 0, rows


def test_the_demo_refuses_a_model_it_cannot_find(tmp_path):
    mgrpo = Path(sys.executable).parent / "mgrpo"
    done = subprocess.run(
        [str(mgrpo), "demo", "learn", "--sub", str(tmp_path / "nowhere"), "--set", f"run.dir={tmp_path / 'runs'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "mgrpo demo: error:" in done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
