"""pipeline config: the timeout warnings of actors/node.py, checked against a worked case."""

from __future__ import annotations


def test_timeout_warnings_count_the_resends_while_nobody_listens():
    """An attempt lasts up to timeout + min(timeout, 5 s) of "no responders" resends (runtime/retry.py):
    4 sub turns × (10 + 5) s × 3 attempts = 180 s of tool calls at worst, so a 170 s subtask timeout
    warns and 181 s does not; the main side likewise with subtask calls of 300 + 5 s."""
    from mgrpo_actors.config.pipeline import PipelineConfig, longest_attempt_s, timeout_warnings

    assert longest_attempt_s(10.0) == 15.0 and longest_attempt_s(2.0) == 4.0 and longest_attempt_s(300.0) == 305.0
    short = PipelineConfig(tool_timeout_s=10.0, subtask_timeout_s=170.0, call_retries=2)
    assert any("subtask_timeout_s (170) is below" in w and "= 180:" in w for w in timeout_warnings(short, 1, 4))
    assert not [
        w
        for w in timeout_warnings(PipelineConfig(tool_timeout_s=10.0, subtask_timeout_s=181.0, call_retries=2), 1, 4)
        if "subtask_timeout_s" in w
    ]
    main = PipelineConfig(subtask_timeout_s=300.0, rollout_timeout_s=2 * 305.0 * 3 - 1, call_retries=2)
    assert any("rollout_timeout_s (1829) is below" in w and "= 1830:" in w for w in timeout_warnings(main, 2, 1))


def test_stall_timeout_is_off_at_zero_and_refuses_negative_nan_and_infinity():
    import math

    import pytest

    from mgrpo_actors.config.pipeline import PipelineConfig

    assert PipelineConfig().stall_timeout_s == 1800.0 and PipelineConfig(stall_timeout_s=0).stall_timeout_s == 0
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="pipeline.stall_timeout_s must be >= 0 and finite"):
            PipelineConfig(stall_timeout_s=bad)


def test_kinds_filter_the_training_questions_and_refuse_unknown_kinds():
    import pytest

    from mgrpo_actors.agents.setup import TaskQuestions
    from mgrpo_actors.config.pipeline import PipelineConfig
    from mgrpo_actors.envs.qa import Question

    def question(n: int, kind: str, level: int) -> Question:
        return Question(id=f"q{n}", question=f"q{n}?", answer="a", kind=kind, level=level)

    train = [question(0, "lookup", 1), question(1, "compare", 2), question(2, "chain", 2), question(3, "compare", 3)]
    questions = TaskQuestions({"train": train})
    picked = questions.training(PipelineConfig(kinds=["compare", "lookup"]))
    assert [q.id for q in picked] == ["q0", "q1", "q3"]  # split order, not the order named
    assert [q.id for q in questions.training(PipelineConfig(kinds=["compare"], levels=[3]))] == ["q3"]
    assert questions.training(PipelineConfig()) == train
    with pytest.raises(ValueError, match=r"with pipeline.levels \[1\] and pipeline.kinds \['chain'\]"):
        questions.training(PipelineConfig(kinds=["chain"], levels=[1]))
    for bad in ([], ["lookup", "riddle"]):
        with pytest.raises(ValueError, match="pipeline.kinds must name some of lookup, chain"):
            PipelineConfig(kinds=bad)
