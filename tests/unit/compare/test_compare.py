"""`mgrpo compare`'s plan, results table and figure (mgrpo_actors/compare/), without running anything."""

import json

import pytest

from mgrpo_actors.compare.plan import CompareConfig, layout_of, method_runs, stage1_overrides
from mgrpo_actors.compare.plot import write_compare_png
from mgrpo_actors.compare.results import markdown_table, method_result
from mgrpo_actors.config.learner import LearnerConfig


@pytest.mark.parametrize("every, total, steps", [(2, 5, [2, 4, 5]), (2, 6, [2, 4, 6]), (3, 1, [1]), (0, 4, [])])
def test_learners_export_every_n_steps_and_after_the_last(every, total, steps):
    assert LearnerConfig(export_every=every).export_steps(total) == steps


def test_eval_steps_are_the_start_every_n_and_the_last():
    assert CompareConfig(steps=6, eval_every=2).eval_steps == [0, 2, 4, 6]
    assert CompareConfig(steps=5, eval_every=2).eval_steps == [0, 2, 4, 5]
    assert CompareConfig(steps=1, eval_every=3).eval_steps == [0, 1]


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"methods": ("m-grpo", "nope")}, "unknown or no methods"),
        ({"steps": 0}, "steps must be >= 1"),
        ({"stage1_steps": -1}, "stage1-steps must be >= 0"),
        ({"methods": ()}, "unknown or no methods"),
    ],
)
def test_bad_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        CompareConfig(**bad)


def test_every_method_starts_from_its_layouts_start_with_the_same_budget():
    cfg = CompareConfig(steps=4, eval_every=2, seed=3, extra=("tools.web_entities=150",))
    starts = {"multi": {"main": "/s/m", "sub": "/s/s"}, "single": {"main": "/s/single"}}
    runs = {run.method: set(run.overrides) for run in method_runs(cfg, starts, "/out/runs")}
    shared = {
        "tools.web_entities=150",
        "run.dir=/out/runs",
        "run.seed=3",
        "pipeline.steps=4",
        "pipeline.stage1_steps=0",
        "learners.main.export_every=2",
        "learners.main.checkpoint_every=0",
    }
    assert all(shared <= overrides for overrides in runs.values())
    assert {"run.method=main-only", "agents.main.model=/s/m", "agents.sub.model=/s/s"} <= runs["main-only"]
    assert {"run.method=single-agent", "agents.main.model=/s/single"} <= runs["single-agent"]
    assert not any(o.startswith("agents.sub.model") for o in runs["single-agent"])
    assert {"run.method=m-grpo", "algo.alignment.mode=none"} <= runs["m-grpo-unaligned"]
    assert "algo.alignment.mode=none" not in runs["m-grpo"]
    assert [layout_of(m) for m in cfg.methods] == ["multi", "multi", "single", "multi"]


def test_the_stage1_warm_start_trains_on_lookups_and_exports_its_end():
    overrides = stage1_overrides(
        CompareConfig(stage1_steps=3, extra=("agents.main.model=tiny:main",)), "single", "/r", {"main": "/w/main"}
    )
    assert {
        "run.method=single-agent",
        "run.id=stage1-single",
        "pipeline.steps=3",
        "pipeline.stage1_steps=3",
        "learners.main.export_every=3",
    } <= set(overrides)
    # The start models (e.g. a warm-up's) come after the --set/--main overrides, so they win.
    assert overrides.index("agents.main.model=/w/main") > overrides.index("agents.main.model=tiny:main")


def _eval(path, means):
    path.write_text(
        json.dumps(
            {
                "setup": {"questions": 4, "runs": 2},
                "aggregate": {
                    name: {"mean": m, "std": 0.1, "min": m - 0.1, "max": m + 0.1} for name, m in means.items()
                },
            }
        )
    )
    return path


def test_results_table_and_figure(tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(
        json.dumps(
            {
                "steps": [
                    {"step": s, "main_reward_mean": r, "sub_reward_mean": None} for s, r in enumerate([0.1, 0.2, 0.6])
                ]
            }
        )
    )
    metrics = {"accuracy": 0.25, "format_valid": 0.5, "sub_calls": 1.0, "turns": 2.0, "reward": 0.3}
    evals = {0: _eval(tmp_path / "a.json", metrics), 2: _eval(tmp_path / "b.json", {**metrics, "accuracy": 0.75})}
    result = method_result(summary, evals, seconds=90)
    assert [p["step"] for p in result["evals"]] == [0, 2] and result["rewards"][2]["main_reward_mean"] == 0.6
    table = markdown_table({"single-agent": result})
    # R_M over the last 2 steps: (0.2 + 0.6) / 2 = 0.4; no R_S; 90 s = 1.5 min.
    assert "| single-agent | 0.250 ± 0.100 | 0.750 ± 0.100 (step 2) | 0.500 ± 0.100 | 1.00 | 0.400 | – | 1.5 |" in table
    png = write_compare_png({"single-agent": result}, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
