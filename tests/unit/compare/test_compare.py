"""`mgrpo compare`'s plan, results table and figure (mgrpo_actors/compare/), without running anything."""

import json

import pytest

from mgrpo_actors.compare.plan import CompareConfig, layout_of, method_runs, stage1_overrides
from mgrpo_actors.compare.plot import write_compare_png
from mgrpo_actors.compare.results import markdown_table, method_result, method_summary, paired_against
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
        ({"seeds": ()}, "one or more distinct seeds"),
        ({"seeds": (1, 1)}, "one or more distinct seeds"),
        ({"eval_batch": 0}, "eval-batch must be >= 1"),
    ],
)
def test_bad_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        CompareConfig(**bad)


def test_every_method_starts_from_its_layouts_start_with_the_same_budget():
    cfg = CompareConfig(steps=4, eval_every=2, seeds=(3, 5), extra=("tools.web_entities=150",))
    starts = {"multi": {"main": "/s/m", "sub": "/s/s"}, "single": {"main": "/s/single"}}
    planned = method_runs(cfg, starts, "/out/runs")
    # one run per method and seed, method by method
    assert [(run.method, run.seed, run.run_id) for run in planned[:3]] == [
        ("m-grpo", 3, "m-grpo-seed3"),
        ("m-grpo", 5, "m-grpo-seed5"),
        ("main-only", 3, "main-only-seed3"),
    ]
    assert len(planned) == 8 and all(f"run.seed={run.seed}" in run.overrides for run in planned)
    assert all(f"run.id={run.run_id}" in run.overrides for run in planned)
    runs = {run.method: set(run.overrides) for run in planned if run.seed == 3}
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


def _eval(path, means, correct=(1, 0, 1, 0)):
    path.write_text(
        json.dumps(
            {
                "setup": {"questions": 4, "runs": 2},
                "aggregate": {
                    name: {"mean": m, "std": 0.1, "min": m - 0.1, "max": m + 0.1} for name, m in means.items()
                },
                "questions": [{"id": f"q{i}", "correct": [c]} for i, c in enumerate(correct)],
            }
        )
    )
    return path


def _summary(path, rewards):
    path.write_text(
        json.dumps(
            {"steps": [{"step": s, "main_reward_mean": r, "sub_reward_mean": None} for s, r in enumerate(rewards)]}
        )
    )
    return path


METRICS = {"accuracy": 0.25, "format_valid": 0.5, "sub_calls": 1.0, "turns": 2.0, "reward": 0.3}


def test_results_table_and_figure(tmp_path):
    summary = _summary(tmp_path / "summary.json", [0.1, 0.2, 0.6])
    evals = {0: _eval(tmp_path / "a.json", METRICS), 2: _eval(tmp_path / "b.json", {**METRICS, "accuracy": 0.75})}
    result = method_result(summary, evals, seconds=90, seed=4)
    assert [p["step"] for p in result["evals"]] == [0, 2] and result["rewards"][2]["main_reward_mean"] == 0.6
    assert result["seed"] == 4 and result["final_questions"] == {"q0": 1.0, "q1": 0.0, "q2": 1.0, "q3": 0.0}
    results = {"single-agent": method_summary([result])}
    assert results["single-agent"]["final_accuracy"] == {
        "values": [0.75],
        "mean": 0.75,
        "ci_low": None,
        "ci_high": None,
    }
    table = markdown_table(results, paired_against(results))
    # R_M over the last 2 steps: (0.2 + 0.6) / 2 = 0.4; no R_S; 90 s = 1.5 min; no m-grpo: nothing paired.
    assert "| single-agent | 1 | 0.250 | 0.750 (one seed) (step 2) | 0.750 | 0.500 | 1.00 | 0.400 | – | 1.5 |" in table
    assert "m-grpo −" not in table
    png = write_compare_png(results, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_seeds_give_an_interval_and_m_grpo_is_paired_against_each_method(tmp_path):
    def run(name, seed, accuracy, correct, rewards):
        evals = {
            0: _eval(tmp_path / f"{name}-start.json", METRICS),
            2: _eval(tmp_path / f"{name}-{seed}.json", {**METRICS, "accuracy": accuracy}, correct),
        }
        return method_result(_summary(tmp_path / f"{name}-{seed}-s.json", rewards), evals, seconds=60, seed=seed)

    results = {
        "m-grpo": method_summary(
            [run("m", 0, 0.5, (1, 1, 0, 0), [0.1, 0.3]), run("m", 1, 0.75, (1, 1, 1, 0), [0.2, 0.5])]
        ),
        "main-only": method_summary(
            [run("o", 0, 0.25, (1, 0, 0, 0), [0.1, 0.1]), run("o", 1, 0.25, (0, 1, 0, 0), [0.1, 0.2])]
        ),
    }
    # final accuracies 0.5 and 0.75: mean 0.625, sd 0.1768, t(0.975, 1) = 12.706: ± 12.706 · 0.1768 / sqrt(2)
    final = results["m-grpo"]["final_accuracy"]
    assert final["mean"] == pytest.approx(0.625) and final["ci_high"] - 0.625 == pytest.approx(12.706 * 0.125)
    paired = paired_against(results)
    # pooled over the seeds: m-grpo (1, 1, 0.5, 0), main-only (0.5, 0.5, 0, 0): d = (0.5, 0.5, 0.5, 0)
    assert list(paired) == ["main-only"] and paired["main-only"]["difference"] == pytest.approx(0.375)
    assert paired["main-only"]["p_value"] == pytest.approx(2 / 8) and paired["main-only"]["ties"] == 1
    table = markdown_table(results, paired)
    assert "| m-grpo | 2 | 0.250 | 0.625 [" in table and "| 0.500, 0.750 |" in table
    assert "| m-grpo − main-only | 4 | +0.375 | [" in table and "| 0.2500 | 3 / 0 / 1 |" in table
    assert write_compare_png(results, tmp_path / "seeds.png").read_bytes()[:4] == b"\x89PNG"
