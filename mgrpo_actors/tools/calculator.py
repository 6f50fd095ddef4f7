"""`calculator`: a bounded arithmetic evaluator for agents (never `eval`).

The expression is parsed by Python's `ast` and walked here; only numbers, + − × ÷ // % ** and
parentheses, unary signs, and abs/min/max/round are understood, so nothing else (names, attributes,
strings, comprehensions) can run. Every bound is checked before the work it guards: the text's length and
node count before the walk, an exponent's size before the power, every intermediate value's magnitude.
A result is exact for integers and given to 12 significant digits otherwise. A number written with a
leading zero is refused, so "1,000" can never be read as the numbers 1 and 0.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import Any

from mgrpo_actors.tools.base import SchemaTool, ToolOutput

__all__ = ["CalculatorError", "CalculatorTool", "evaluate", "format_number"]

MAX_EXPRESSION_CHARS = 200
MAX_NODES = 64  # ast nodes of one expression: bounds the walk (and its recursion) whatever the text
MAX_MAGNITUDE = 1e15  # any value, operand or result, must stay within ±this
MAX_EXPONENT = 64
MAX_ROUND_DIGITS = 15  # as many as a value within MAX_MAGNITUDE has
SIGNIFICANT_DIGITS = 12

Number = int | float
_LEADING_ZERO = re.compile(r"(?<![\w.])0\d")  # a number written with a leading zero, e.g. the "000" of "1,000"

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int]] = {  # name: (function, fewest, most arguments)
    "abs": (abs, 1, 1),
    "min": (min, 2, 8),
    "max": (max, 2, 8),
    "round": (round, 1, 2),
}


class CalculatorError(ValueError):
    """An expression the calculator refuses or cannot compute, phrased for the agent."""


def _checked(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError(f"not a number: {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"a value exceeds {MAX_MAGNITUDE:.0e} in magnitude")
    return value


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponents are limited to ±{MAX_EXPONENT}")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    if base < 0 and isinstance(exponent, float) and not exponent.is_integer():
        raise CalculatorError("a negative number to a fractional power is not a real number")
    # Bound the result before computing it: an integer power is exact and could be huge.
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > math.log10(MAX_MAGNITUDE):
        raise CalculatorError(f"a value exceeds {MAX_MAGNITUDE:.0e} in magnitude")
    return base**exponent


def _apply(op: type, left: Number, right: Number) -> Number:
    if op is ast.Pow:
        return _power(left, right)
    if op in (ast.Div, ast.FloorDiv, ast.Mod) and right == 0:
        raise CalculatorError("division by zero")
    return _BINARY[op](left, right)


def _walk(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        return _checked(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _checked(_apply(type(node.op), _walk(node.left), _walk(node.right)))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_walk(node.operand)))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        function, fewest, most = _FUNCTIONS[node.func.id]
        if node.keywords or not fewest <= len(node.args) <= most:
            raise CalculatorError(f"{node.func.id} takes {fewest}-{most} numbers")
        args = [_walk(arg) for arg in node.args]
        if node.func.id == "round" and len(args) == 2:
            if not isinstance(args[1], int):
                raise CalculatorError("round's digits must be a whole number")
            # A whole number rounded to -d digits computes 10**d in full: bound d (every value is below 1e15).
            if abs(args[1]) > MAX_ROUND_DIGITS:
                raise CalculatorError(f"round's digits are limited to ±{MAX_ROUND_DIGITS}")
        return _checked(function(*args))
    what = type(node.op).__name__ if isinstance(node, ast.BinOp | ast.UnaryOp) else type(node).__name__
    raise CalculatorError(f"unsupported: {what}; use numbers, + - * / // % **, parentheses and abs, min, max, round")


def evaluate(expression: str) -> Number:
    """The value of `expression`; CalculatorError (a message for the agent) when it is refused or fails."""
    text = expression.strip()
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    text = text.replace("×", "*").replace("÷", "/").replace("−", "-").replace("^", "**")
    if _LEADING_ZERO.search(text):  # "max(1,000, 2)" would read as max(1, 0, 2): refuse, never misread
        raise CalculatorError("write numbers without thousands separators or leading zeros")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        hint = " (write numbers without thousands separators)" if "," in text else ""
        raise CalculatorError(f"cannot read the expression: {exc.msg}{hint}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculatorError(f"the expression has more than {MAX_NODES} parts")
    if isinstance(tree.body, ast.Tuple):
        raise CalculatorError("one expression at a time (write numbers without thousands separators)")
    try:
        return _walk(tree.body)
    except (OverflowError, ZeroDivisionError, TypeError, ValueError) as exc:
        if isinstance(exc, CalculatorError):
            raise
        raise CalculatorError(f"cannot compute: {exc}") from None


def format_number(value: Number) -> str:
    """An integer exactly; a float to SIGNIFICANT_DIGITS digits ("g": a whole float has no ".0")."""
    if isinstance(value, int):
        return str(value)
    return f"{value:.{SIGNIFICANT_DIGITS}g}"


class CalculatorTool(SchemaTool):
    """Evaluates one arithmetic expression and returns `expression = value`."""

    name = "calculator"
    description = (
        "Compute an arithmetic expression (whole numbers exactly, others to 12 digits): numbers, + - * / // % ** "
        "(or ^), parentheses, and abs, min, max, round. Example: 2024 - 1871."
    )
    parameters = {
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_EXPRESSION_CHARS,
                "description": "the expression, e.g. (1990 - 1871) / 2",
            }
        },
        "required": ["expression"],
        "additionalProperties": False,
    }

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        expression = arguments["expression"]
        try:
            value = evaluate(expression)
        except CalculatorError as exc:
            return ToolOutput.failure(f"calculator: {exc}")
        return ToolOutput.success(f"{expression.strip()} = {format_number(value)}")
