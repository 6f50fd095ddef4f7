"""`reason`: the injected model call, and clear error results when it is absent or fails."""

from __future__ import annotations

import pytest

from mgrpo_actors.tools.reason import ReasonTool


def test_reason_sends_the_problem_and_returns_the_reply() -> None:
    prompts: list[str] = []

    def generate(prompt: str) -> str:
        prompts.append(prompt)
        return "  7 * 6 = 42\nResult: 42  "

    result = ReasonTool(generate)({"problem": "What is 7 times 6?"})
    assert result.ok and result.content == "7 * 6 = 42\nResult: 42"
    assert len(prompts) == 1 and "Problem:\nWhat is 7 times 6?" in prompts[0]


def test_reason_uses_the_configured_template_and_truncates() -> None:
    tool = ReasonTool(lambda p: p * 3, prompt_template="Q: {problem}", max_output_chars=10)
    result = tool({"problem": "abcd"})
    assert result.ok and result.content == "Q: abcdQ: \n[truncated]"


@pytest.mark.parametrize(
    ("generate", "message"),
    [
        (None, "no reasoning model is configured"),
        (lambda p: 1 / 0, "reasoning model failed: ZeroDivisionError"),
        (lambda p: None, "reasoning model returned NoneType, not text"),
        (lambda p: "   ", "reasoning model returned an empty reply"),
    ],
)
def test_reason_failures_are_error_results(generate: object, message: str) -> None:
    result = ReasonTool(generate)({"problem": "p"})  # type: ignore[arg-type]
    assert not result.ok and result.error is not None and message in result.error


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required field 'problem'"),
        ({"problem": 3}, "expected string"),
        ({"problem": ""}, "at least 1"),
        ({"problem": "\n\t"}, "must not be blank"),
        ({"problem": "x" * 8001}, "at most 8000"),
        ({"problem": "p", "model": "big"}, "unexpected fields ['model']"),
    ],
)
def test_reason_rejects_bad_arguments_before_calling_the_model(arguments: dict, message: str) -> None:
    calls: list[str] = []
    result = ReasonTool(lambda p: calls.append(p) or "ok")(arguments)
    assert not result.ok and result.error is not None and message in result.error
    assert calls == []


def test_reason_template_must_have_a_problem_slot() -> None:
    with pytest.raises(ValueError, match="{problem}"):
        ReasonTool(lambda p: p, prompt_template="no slot")
