"""`mgrpo compare`'s progress and resume (compare/progress.py): what counts as done, the time left, another plan."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mgrpo_actors.compare.plan import CompareConfig
from mgrpo_actors.compare.progress import PROGRESS_FILE, PlanProgress, duration, step_kind
from mgrpo_actors.compare.steps import StepRunner, plan_graph

STEPS = ["stage1-multi", "eval-start-multi", "run-m-grpo", "eval-m-grpo-step2", "run-main-only", "eval-main-only-step2"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_step_is_reused_only_with_the_same_command_inputs_and_outputs(tmp_path):
    output = tmp_path / "evals" / "start-multi.json"
    output.parent.mkdir()
    progress = PlanProgress(tmp_path, STEPS)
    progress.record("stage1-multi", progress.key(["run"], "cfg"), 30.0)
    key = progress.key(["eval", "--limit", "16"], "cfg", after=["stage1-multi"])
    assert not progress.reusable("eval-start-multi", key, [output]) and progress.done == {"stage1-multi": 30.0}
    output.write_text("{}")
    assert not progress.reusable("eval-start-multi", key, [output])  # there, but never recorded: a step cut off
    progress.record("eval-start-multi", key, 12.5)
    again = PlanProgress(tmp_path, STEPS)  # the next invocation
    assert again.key(["eval", "--limit", "16"], "cfg", after=["stage1-multi"]) == key
    assert again.reusable("eval-start-multi", key, [output])
    # another command (more questions), another config file's content: another step
    assert again.key(["eval", "--limit", "200"], "cfg", after=["stage1-multi"]) != key
    assert again.key(["eval", "--limit", "16"], "edited", after=["stage1-multi"]) != key
    # what it builds on ran again (now or in any earlier invocation): a new record id, another key
    again.record("stage1-multi", again.key(["run"], "cfg"), 31.0)
    later = PlanProgress(tmp_path, STEPS)
    assert later.key(["eval", "--limit", "16"], "cfg", after=["stage1-multi"]) != key
    output.unlink()
    assert not later.reusable("eval-start-multi", key, [output])


def test_a_step_about_to_run_is_forgotten_first(tmp_path):
    progress = PlanProgress(tmp_path, STEPS)
    progress.record("stage1-multi", "k", 30.0)
    progress.forget("stage1-multi")  # cut off after this: never done, whatever it left
    assert PlanProgress(tmp_path, STEPS).done == {} and not PlanProgress(tmp_path, STEPS).reusable(
        "stage1-multi", "k", []
    )


@pytest.mark.parametrize(
    "text",
    ["{not json", '{"done": {"stage1-multi": 30.0}}', '{"done": {"stage1-multi": {"key": "k", "seconds": 1.0}}}', "[]"],
)
def test_an_unreadable_or_older_progress_file_counts_nothing_as_done(tmp_path, text):
    (tmp_path / PROGRESS_FILE).write_text(text)
    progress = PlanProgress(tmp_path, STEPS)
    assert progress.done == {} and not progress.reusable("stage1-multi", "k", [])


def test_time_left_from_the_finished_steps_of_each_kind(tmp_path):
    clock = Clock()
    progress = PlanProgress(tmp_path, STEPS, clock=clock)
    assert progress.seconds_left("stage1-multi") is None
    assert progress.where("stage1-multi") == "[1/6] stage1-multi (0 of 6 done, 0 s elapsed)"
    progress.record("stage1-multi", "a", 100.0)
    progress.record("eval-start-multi", "b", 10.0)
    clock.now += 80
    # after run-m-grpo: a run left, and none finished yet: another kind's time would not say what one costs
    assert progress.seconds_left("run-m-grpo") is None
    assert progress.where("run-m-grpo") == (
        "[3/6] run-m-grpo (2 of 6 done, 80 s elapsed, time left known once a step of each kind has finished)"
    )
    progress.record("run-m-grpo", "c", 300.0)
    # after the evaluation: the other run (300) and the other evaluation (10)
    assert progress.seconds_left("eval-m-grpo-step2") == pytest.approx(300.0 + 10.0)
    assert progress.where("eval-m-grpo-step2").endswith("about 5 min after this one)")
    recorded = json.loads((tmp_path / PROGRESS_FILE).read_text())["done"]
    assert {name: (r["key"], r["seconds"]) for name, r in recorded.items()} == {
        "stage1-multi": ("a", 100.0),
        "eval-start-multi": ("b", 10.0),
        "run-m-grpo": ("c", 300.0),
    }
    assert len({r["id"] for r in recorded.values()}) == 3


def test_names_kinds_and_durations():
    assert [step_kind(n) for n in ("warmup-multi", "eval-start-single", "run-m-grpo-unaligned")] == [
        "warmup",
        "eval",
        "run",
    ]
    assert [duration(s) for s in (42, 720, 3900)] == ["42 s", "12 min", "1 h 05 min"]
    with pytest.raises(ValueError, match="unique"):
        PlanProgress(__import__("pathlib").Path("/nonexistent"), ["a", "a"])


def _graph(cfg: CompareConfig, layouts: list[str], warmup: bool, tmp_path) -> list:
    starts = {"multi": {"main": "m", "sub": "s"}, "single": {"main": "m"}}
    steps = StepRunner(None, tmp_path, [], "", None)
    graph, _ = plan_graph(
        cfg, layouts, {layout: starts[layout] for layout in layouts}, warmup, steps, tmp_path / "runs"
    )
    return graph


def _plan(cfg: CompareConfig, layouts: list[str], warmup: bool, tmp_path) -> dict[str, list[str]]:
    return {step.name: list(step.after) for step in _graph(cfg, layouts, warmup, tmp_path)}


def test_the_warm_ups_run_alone_on_every_core_and_nothing_else_does(tmp_path):
    """Marked alone for the schedule (compare/schedule.py) and run without a core lane by the runner: one flag."""
    cfg = CompareConfig(methods=("m-grpo", "single-agent"), steps=2, eval_every=2, stage1_steps=1)
    graph = _graph(cfg, ["multi", "single"], True, tmp_path)
    assert [step.name for step in graph if step.alone] == ["warmup-multi", "warmup-single"]
    assert all(step.work.keywords.get("alone", False) == step.alone for step in graph if hasattr(step.work, "keywords"))


def _items(plan: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    return list(plan.items())  # in order: the order one step at a time runs them


def test_the_plan_lists_every_step_in_the_order_it_runs_with_what_it_builds_on(tmp_path):
    cfg = CompareConfig(methods=("m-grpo", "single-agent"), steps=4, eval_every=2, stage1_steps=1)
    assert _items(_plan(cfg, ["multi", "single"], True, tmp_path)) == _items(
        {
            "warmup-multi": [],
            "warmup-single": [],
            "stage1-multi": ["warmup-multi"],
            "stage1-single": ["warmup-single"],
            "eval-start-multi": ["stage1-multi"],
            "eval-start-single": ["stage1-single"],
            "run-m-grpo-seed0": ["stage1-multi"],
            "eval-m-grpo-seed0-step2": ["run-m-grpo-seed0"],
            "eval-m-grpo-seed0-step4": ["run-m-grpo-seed0"],
            "run-single-agent-seed0": ["stage1-single"],
            "eval-single-agent-seed0-step2": ["run-single-agent-seed0"],
            "eval-single-agent-seed0-step4": ["run-single-agent-seed0"],
        }
    )
    two = _plan(
        CompareConfig(methods=("main-only",), seeds=(0, 7), steps=1, stage1_steps=0), ["multi"], False, tmp_path
    )
    assert _items(two) == _items(
        {
            "eval-start-multi": [],
            "run-main-only-seed0": [],
            "eval-main-only-seed0-step1": ["run-main-only-seed0"],
            "run-main-only-seed7": [],
            "eval-main-only-seed7-step1": ["run-main-only-seed7"],
        }
    )


def test_steps_at_once_share_the_estimate_and_the_wall_time_carries_over(tmp_path):
    clock = Clock()
    progress = PlanProgress(tmp_path, STEPS, clock=clock, parallel=2)
    progress.record("stage1-multi", "a", 100.0)
    progress.record("eval-start-multi", "b", 10.0)
    progress.record("run-main-only", "r", 50.0)
    # left besides run-m-grpo: the two evaluations of the runs, 10 each; 2 at once
    assert progress.seconds_left("run-m-grpo") == pytest.approx((10.0 + 10.0) / 2)
    assert PlanProgress(tmp_path, STEPS, parallel=8).seconds_left("run-m-grpo") == pytest.approx(20.0 / 2)
    clock.now += 300
    progress.record("run-m-grpo", "c", 290.0)
    assert progress.wall_seconds == pytest.approx(300.0)
    later = Clock()
    resumed = PlanProgress(tmp_path, STEPS, clock=later)
    later.now += 20
    assert resumed.wall_seconds == pytest.approx(320.0)


def test_the_single_agent_can_warm_up_from_m_s_warm_up_for_fewer_steps(tmp_path):
    cfg = CompareConfig(methods=("m-grpo", "single-agent"), steps=2, eval_every=2, stage1_steps=0, single_from_main=50)
    assert _plan(cfg, ["multi", "single"], True, tmp_path)["warmup-single"] == ["warmup-multi"]
    steps = StepRunner(None, tmp_path, [], "", None)
    starts = {"multi": {"main": "m", "sub": "s"}, "single": {"main": "m"}}
    graph, _ = plan_graph(cfg, ["multi", "single"], starts, True, steps, tmp_path / "runs")
    single = next(step for step in graph if step.name == "warmup-single").work
    command = single.args[3:]  # after the step's name, outputs and what it builds on
    assert command == (
        "warmup",
        "--set",
        "run.method=single-agent",
        "--set",
        f"agents.main.model={tmp_path / 'warmup-multi' / 'main'}",
        "--steps",
        "50",
        "--reuse",
        "--out",
        str(tmp_path / "warmup-single"),
    )
    assert starts["single"] == {"main": str(tmp_path / "warmup-single" / "main")}
    # where M's warm-up practised copying (warmup.copy_steps), the single agent's from it does not again; elsewhere the
    # command is as it was, so a comparison's finished steps keep their keys
    practised = dataclasses.replace(cfg, warmup_copy_steps=1500)
    graph, _ = plan_graph(practised, ["multi", "single"], dict(starts, single={"main": "m"}), True, steps, tmp_path)
    single = next(step for step in graph if step.name == "warmup-single").work
    assert "warmup.copy_steps=0" in single.args and "warmup.copy_steps=0" not in command
    for bad in ({"methods": ("single-agent",)}, {"methods": ("m-grpo",)}, {"single_from_main": -1}):
        with pytest.raises(ValueError, match="single-from-main"):
            CompareConfig(**{"single_from_main": 5, **bad})
