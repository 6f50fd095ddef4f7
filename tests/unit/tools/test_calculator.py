"""The calculator tool: exact arithmetic, and every refusal an agent can provoke (never `eval`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_actors.config.node import ToolsConfig
from mgrpo_actors.tools.calculator import CalculatorError, CalculatorTool, evaluate, format_number
from mgrpo_actors.tools.setup import build_tool_registry


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2024 - 1871", 153),
        ("(1990 - 1871) / 2", 59.5),
        ("7 // 2", 3),
        ("-7 % 3", 2),
        ("2 ** 10", 1024),
        ("2 ^ 10", 1024),
        ("3 × 4 − 2 ÷ 4", 11.5),
        ("abs(1871 - 1990)", 119),
        ("max(3, 9, 4) - min(8, 2)", 7),
        ("round(10 / 3, 2)", 3.33),
        ("10 ** 15", 10**15),
        ("2 ** -2", 0.25),
        ("  +5 ", 5),
        ("0.5 + 10.05 + 0", 10.55),
        ("round(1234, -2)", 1200),
    ],
)
def test_evaluate_computes(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os').system('true')", "unsupported: Call"),
        ("open('x')", "unsupported: Call"),
        ("x + 1", "unsupported: Name"),
        ("(1).real", "unsupported: Attribute"),
        ("'a' * 3", "not a number"),
        ("[1, 2]", "unsupported: List"),
        ("1 if 2 else 3", "unsupported: IfExp"),
        ("1 < 2", "unsupported: Compare"),
        ("True + 1", "not a number"),
        ("1j", "not a number"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("9 ** 999999999", "exponents are limited"),
        ("10 ** 16", "exceeds"),
        ("99999999 * 99999999", "exceeds"),
        ("1e400", "not a finite number"),
        ("(-8) ** 0.5", "not a real number"),
        ("1,871 - 2", "one expression at a time"),
        ("1,871 -", "thousands separators"),
        ("1,000 - 2", "leading zeros"),
        ("2 +", "cannot read"),
        ("", "empty"),
        ("1" * 201, "longer than"),
        ("+".join(["1"] * 40), "more than 64 parts"),
        ("round(2.5, 1.5)", "whole number"),
        ("round(5, -999999999999999)", "limited to"),
        ("max(1,000, 2)", "leading zeros"),
        ("007 + 1", "leading zeros"),
        ("max(1)", "max takes 2-8"),
        ("abs(x=1)", "abs takes"),
    ],
)
def test_evaluate_refuses_with_a_reason(expression, reason):
    with pytest.raises(CalculatorError, match=reason.replace("(", r"\(").replace("*", r"\*")):
        evaluate(expression)


@given(st.integers(-(10**6), 10**6), st.integers(-(10**6), 10**6))
def test_integer_arithmetic_is_exact(a, b):
    assert evaluate(f"{a} + {b}") == a + b
    assert evaluate(f"{a} * {b}") == a * b
    assert evaluate(f"({a}) - ({b})") == a - b


@given(st.text(max_size=60))
def test_any_text_gives_a_value_or_a_calculator_error(text):
    try:
        value = evaluate(text)
    except CalculatorError:
        return
    assert isinstance(value, int | float) and not isinstance(value, bool)


def test_format_number():
    assert format_number(153) == "153"
    assert format_number(59.5) == "59.5"
    assert format_number(4.0) == "4"
    assert format_number(1 / 3) == "0.333333333333"


def test_the_tool_answers_and_fails_as_a_tool_does():
    tool = CalculatorTool()
    assert tool({"expression": "2024 - 1871"}).content == "2024 - 1871 = 153"
    failed = tool({"expression": "os.system('x')"})
    assert not failed.ok and failed.error.startswith("calculator: unsupported")
    assert not tool({"expr": "1"}).ok  # schema: the argument's name is checked before anything runs


def test_a_node_can_serve_it_by_name_without_building_the_web():
    registry = build_tool_registry(ToolsConfig(serve=["calculator"]))
    assert registry.names == ["calculator"]
    assert registry.call("calculator", {"expression": "6 * 7"}).content == "6 * 7 = 42"
