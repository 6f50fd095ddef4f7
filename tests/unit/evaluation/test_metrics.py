"""`mgrpo eval`'s numbers: per-run means, their spread over runs (worked by hand), the runs themselves on
scripted agents (known answers, so every metric has a known value) and the JSON report built from them."""

import math
from dataclasses import asdict

import pytest

from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.evaluation.metrics import METRICS, QuestionOutcome, RunMetrics, Spread, run_metrics, spread_over_runs
from mgrpo_actors.evaluation.report import EvalSetup, eval_report
from mgrpo_actors.evaluation.runner import EvalConfig, evaluate
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import AgentModel
from tests.agent_helpers import small_web, sub_script, tiny_tokenizer, web_tools
from tests.scripted_engine import ScriptedEngine, assistant_turns


def outcome(qid, correct, format_valid, sub_calls, turns, reward):
    return QuestionOutcome(qid, correct, format_valid, sub_calls, turns, reward, answer="x")


def test_run_metrics_are_means_over_questions():
    metrics = run_metrics(
        [
            outcome("a", 1.0, True, 2, 3, 1.0),
            outcome("b", 0.0, True, 0, 1, 0.1),
            outcome("c", 0.0, False, 1, 5, 0.0),
            outcome("d", 0.5, True, 1, 3, 0.55),
        ]
    )
    assert asdict(metrics) == pytest.approx(
        {"accuracy": 0.375, "format_valid": 0.75, "sub_calls": 1.0, "turns": 3.0, "reward": 0.4125}
    )


def test_spread_over_runs_worked_by_hand():
    runs = [
        RunMetrics(accuracy=0.0, format_valid=1.0, sub_calls=1.0, turns=2.0, reward=0.1),
        RunMetrics(accuracy=0.5, format_valid=1.0, sub_calls=2.0, turns=2.0, reward=0.55),
        RunMetrics(accuracy=1.0, format_valid=0.5, sub_calls=3.0, turns=5.0, reward=0.5),
    ]
    spread = spread_over_runs(runs)
    assert list(spread) == list(METRICS) == ["accuracy", "format_valid", "sub_calls", "turns", "reward"]
    # Population std: sqrt(((0-0.5)^2 + 0 + (1-0.5)^2) / 3) = sqrt(1/6).
    assert asdict(spread["accuracy"]) == pytest.approx({"mean": 0.5, "std": math.sqrt(1 / 6), "min": 0.0, "max": 1.0})
    assert asdict(spread["format_valid"]) == pytest.approx(
        {"mean": 5 / 6, "std": math.sqrt(1 / 18), "min": 0.5, "max": 1.0}
    )
    assert asdict(spread["sub_calls"]) == pytest.approx({"mean": 2.0, "std": math.sqrt(2 / 3), "min": 1.0, "max": 3.0})
    assert asdict(spread["turns"]) == pytest.approx({"mean": 3.0, "std": math.sqrt(2.0), "min": 2.0, "max": 5.0})
    assert spread["reward"].mean == pytest.approx(1.15 / 3) and spread["reward"].max == 0.55


def test_one_run_has_no_spread():
    (accuracy,) = [spread_over_runs([RunMetrics(0.25, 1.0, 0.0, 1.0, 0.3)])["accuracy"]]
    assert accuracy == Spread(mean=0.25, std=0.0, min=0.25, max=0.25)


def test_empty_inputs_are_errors():
    with pytest.raises(ValueError, match="at least one question"):
        run_metrics([])
    with pytest.raises(ValueError, match="at least one run"):
        spread_over_runs([])
    with pytest.raises(ValueError, match="runs >= 1"):
        EvalConfig(runs=0)


def scripted_setup():
    """Three lookups: M delegates then answers q0 right and q1 wrong; on q2 its first turn has no action
    (format invalid), then it gives the gold answer, which must not count as correct."""
    web = small_web()
    questions = [q for q in web.splits["train"] if q.kind == "lookup" and len(q.evidence) == 1][:3]
    right, wrong, malformed = questions

    def respond(prompt: str) -> str:
        first = assistant_turns(prompt) == 0
        if malformed.question in prompt:
            return "thinking without any action" if first else format_answer(malformed.answer)
        if first:
            return format_tool_call("delegate", {"task": "look it up", "context": ""})
        return format_answer(right.answer if right.question in prompt else "not the answer")

    tokenizer = tiny_tokenizer()
    main = AgentModel(ScriptedEngine(tokenizer, respond), tokenizer)
    sub = AgentModel(sub_script(right), tokenizer)
    cfg = RolloutConfig(
        main=AgentConfig(max_new_tokens_per_turn=128, max_turns=3), sub=AgentConfig(max_new_tokens_per_turn=128)
    )
    return questions, main, sub, web_tools(web), cfg


def test_runs_on_scripted_agents_count_only_format_valid_answers_as_correct():
    questions, main, sub, tools, cfg = scripted_setup()
    ticks = []
    runs = evaluate(questions, main, sub, tools, cfg, EvalConfig(runs=2, seed=5), on_question=lambda: ticks.append(1))
    assert len(ticks) == 6 and len(runs) == 2
    for outcomes in runs:
        assert [o.question_id for o in outcomes] == [q.id for q in questions]
        assert [(o.correct, o.format_valid, o.sub_calls, o.turns) for o in outcomes] == [
            (1.0, True, 1, 2),
            (0.0, True, 1, 2),
            (0.0, False, 0, 2),
        ]
        assert outcomes[2].answer == questions[2].answer  # the gold answer, given in a malformed episode
        assert [o.reward for o in outcomes] == pytest.approx([1.0, 0.1, 0.0])  # α = (0.1, 0.9)
        expected = {"accuracy": 1 / 3, "format_valid": 2 / 3, "sub_calls": 2 / 3, "turns": 2.0, "reward": 1.1 / 3}
        assert asdict(run_metrics(outcomes)) == pytest.approx(expected)


def test_the_single_agent_makes_no_sub_calls():
    questions, main, _, tools, cfg = scripted_setup()
    (outcomes,) = evaluate(questions[:2], main, None, tools, cfg, EvalConfig(runs=1, single_agent=True))
    assert [o.sub_calls for o in outcomes] == [0, 0]
    with pytest.raises(ValueError, match="unless in single-agent mode"):
        evaluate(questions, main, None, tools, cfg, EvalConfig(runs=1))


def test_the_report_holds_setup_runs_spread_and_every_question_per_run():
    questions, main, sub, tools, cfg = scripted_setup()
    eval_cfg = EvalConfig(runs=2, seed=10)
    runs = evaluate(questions, main, sub, tools, cfg, eval_cfg)
    setup = EvalSetup(
        mode="main+sub",
        models={"main": "m", "sub": "s"},
        dataset={"split": "train"},
        available=9,
        correct_judge="exact-match",
    )
    report = eval_report(setup, eval_cfg, questions, runs, seconds=1.23456)
    assert report["setup"]["questions"] == 3 and report["setup"]["runs"] == 2 and report["setup"]["seeds"] == [10, 11]
    assert report["setup"]["available"] == 9 and report["seconds"] == 1.235
    assert [(r["run"], r["seed"]) for r in report["runs"]] == [(0, 10), (1, 11)]
    assert report["runs"][0]["accuracy"] == pytest.approx(1 / 3)
    assert report["aggregate"]["accuracy"] == pytest.approx({"mean": 1 / 3, "std": 0.0, "min": 1 / 3, "max": 1 / 3})
    rows = report["questions"]
    assert [row["id"] for row in rows] == [q.id for q in questions]
    assert (
        rows[0]["correct"] == [1.0, 1.0]
        and rows[2]["format_valid"] == [False, False]
        and rows[1]["answers"] == ["not the answer"] * 2
    )
    with pytest.raises(ValueError, match="need 2 runs of 3 outcomes"):
        eval_report(setup, eval_cfg, questions, runs[:1], seconds=0.0)
