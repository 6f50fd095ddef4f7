"""`mgrpo compare` for real on the tiny models: a format warm-up and a stage-1 warm start per layout, two methods
from it, each evaluated at the start and after its step, the results written (tiny random models score 0: this
checks the wiring, docs/results/ holds a real comparison)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_script

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TINY = ("--main", "tiny:main", "--sub", "tiny:sub", "--set", "tools.web_entities=150")


COMMAND = (
    "mgrpo",
    "compare",
    *TINY,
    "--methods",
    "m-grpo,single-agent",
    "--steps",
    "1",
    "--eval-every",
    "1",
    "--warmup",
    "--stage1-steps",
    "1",
    "--eval-questions",
    "2",
    "--eval-runs",
    "1",
    "--eval-batch",
    "1",
    "--single-from-main",
    "1",
)
STEPS = [
    "warmup-multi",
    "warmup-single",
    "stage1-multi",
    "stage1-single",
    "eval-start-multi",
    "eval-start-single",
    "run-m-grpo-seed0",
    "eval-m-grpo-seed0-step1",
    "run-single-agent-seed0",
    "eval-single-agent-seed0-step1",
]


def test_compare_runs_evaluates_and_reports_each_method(tmp_path):
    out = tmp_path / "cmp"
    done = run_script(*COMMAND, "--out", str(out), timeout_s=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "compare.json").read_text())
    assert list(result["methods"]) == ["m-grpo", "single-agent"] and result["eval_steps"] == [0, 1]
    runs = out / "runs"
    # Stage 0 (--warmup) per layout, then stage 1 from its models.
    assert json.loads((out / "warmup-multi" / "warmup.json").read_text())["method"] == "m-grpo"
    single = json.loads((out / "warmup-single" / "warmup.json").read_text())
    # the single agent's warm-up: 1 step from the M + S warm-up's M (--single-from-main 1)
    assert single["method"] == "single-agent" and single["settings"]["steps"] == 1
    # built in the model cache (mgrpo warmup --reuse) and linked: a comparison redone never warms up again
    assert all((out / "warmup-multi" / side).is_symlink() for side in ("main", "sub"))
    # rich folds long lines, even inside a path
    stage1 = "".join((out / "logs" / "stage1-single.log").read_text().split())
    assert f"(single-agent):oneagentwitheverytool,{out / 'warmup-single' / 'main'}" in stage1
    assert result["starts"] == {
        "multi": {
            "main": str(runs / "stage1-multi/exports/main/step1"),
            "sub": str(runs / "stage1-multi/exports/sub/step1"),
        },
        "single": {"main": str(runs / "stage1-single/exports/main/step1")},
    }
    for method, models in (
        ("m-grpo", {"main": "m-grpo-seed0/exports/main/step1", "sub": "m-grpo-seed0/exports/sub/step1"}),
        ("single-agent", {"main": "single-agent-seed0/exports/main/step1"}),
    ):
        report = json.loads((out / "evals" / f"{method}-seed0-step1.json").read_text())
        assert report["setup"]["models"] == {side: str(runs / path) for side, path in models.items()}
        assert report["setup"]["questions"] == 2 and report["setup"]["runs"] == 1
        assert report["setup"]["batch_questions"] == 1
        (run,) = result["methods"][method]["runs"]
        assert run["seed"] == 0 and [p["step"] for p in run["evals"]] == [0, 1] and len(run["rewards"]) == 1
        assert result["methods"][method]["seeds"] == [0] and len(run["final_questions"]) == 2
    assert result["config"]["seeds"] == [0] and result["config"]["eval_questions"] == 2
    # M-GRPO paired against the other method on the same 2 questions
    assert list(result["paired"]) == ["single-agent"] and result["paired"]["single-agent"]["questions"] == 2
    table = (out / "compare.md").read_text().splitlines()
    assert table[0].startswith("| method | seeds | val. accuracy, start") and [
        line.split(" | ")[0] for line in table[2:4]
    ] == ["| m-grpo", "| single-agent"]
    assert table[7].startswith("| m-grpo − single-agent | 2 | ")
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"
    # what it took: every step as it ran, and each warm-up's build (from its warmup.json)
    assert result["time"]["by_kind_seconds"].keys() == {"warmup", "stage1", "eval", "run"}
    assert result["time"]["warmups_built_seconds"].keys() == {"multi", "single"}
    assert " wall, 1 step at once; the steps' own time " in (out / "compare.md").read_text().splitlines()[-1]
    # Progress over the whole plan, every step recorded as it finished.
    assert "[7/10] run-m-grpo-seed0 (6 of 10 done," in done.stdout and "after this one)" in done.stdout
    assert list(json.loads((out / "progress.json").read_text())["done"]) == STEPS

    # Interrupted after its last run: two evaluations' reports are gone. The same command redoes those only, here
    # both at once (--parallel 2 changes no step's command).
    redone = ["eval-m-grpo-seed0-step1", "eval-single-agent-seed0-step1"]
    for name in redone:
        (out / "evals" / f"{name.removeprefix('eval-')}.json").unlink()
    names = ("m-grpo-seed0", "single-agent-seed0")
    before = {name: (out / "runs" / name / "summary.json").stat().st_mtime_ns for name in names}
    again = run_script(*COMMAND, "--parallel", "2", "--out", str(out), timeout_s=200)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "resuming: 10 of 10 steps finished before" in again.stdout and "up to 2 at once" in again.stdout
    reused = [name for name in STEPS if f"] {name} (" in again.stdout and f"{name}: done in" not in again.stdout]
    assert reused == [name for name in STEPS if name not in redone], again.stdout
    assert all(f"{name}: done in" in again.stdout for name in redone)
    assert before == {n: (out / "runs" / n / "summary.json").stat().st_mtime_ns for n in names}
    assert json.loads((out / "compare.json").read_text())["methods"].keys() == result["methods"].keys()


def test_compare_refuses_an_unknown_method(tmp_path):
    done = run_script("mgrpo", "compare", "--methods", "m-grpo,magic", "--out", str(tmp_path), timeout_s=60)
    assert done.returncode == 2 and "unknown or no methods ['magic']" in done.stderr


def test_compare_refuses_a_single_agent_warm_up_from_m_s_it_cannot_make(tmp_path):
    done = run_script("mgrpo", "compare", "--single-from-main", "300", "--out", str(tmp_path), timeout_s=60)
    assert done.returncode == 2 and "it needs --warmup" in done.stderr
    ramp = ("--warmup", "--set", "warmup.lr_ramp_steps=50", "--single-from-main", "50", "--out", str(tmp_path))
    done = run_script("mgrpo", "compare", *ramp, timeout_s=60)
    assert done.returncode == 2 and "--single-from-main 50 is not above warmup.lr_ramp_steps 50" in done.stderr
    assert not (tmp_path / "progress.json").exists()  # refused before anything ran
