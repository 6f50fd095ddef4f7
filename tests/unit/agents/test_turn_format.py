"""The turn parser: valid turns, a clear reason for every malformed one, and no crash on any input."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo_actors.agents.turn_format import (
    INTERNAL_ERROR,
    TURN_FORMAT_INSTRUCTIONS,
    ParsedTurn,
    format_answer,
    format_parse_error,
    format_tool_call,
    format_tool_result,
    parse_turn,
)
from mgrpo_actors.tools.base import ToolOutput


def test_tool_call_with_think() -> None:
    turn = parse_turn(
        '<think>I should search.</think>\n<tool_call>{"name": "search", "arguments": {"query": "Zai"}}</tool_call>'
    )
    assert turn == ParsedTurn(
        kind="tool_call", think="I should search.", tool_name="search", tool_arguments={"query": "Zai"}
    )
    assert turn.is_valid


def test_answer_without_think_and_surrounding_whitespace() -> None:
    turn = parse_turn("\n  <answer>\n Brakton \n</answer>\n\n")
    assert turn == ParsedTurn(kind="answer", answer="Brakton")


def test_tags_inside_think_are_just_thoughts() -> None:
    turn = parse_turn("<think>maybe <tool_call> or <answer>? no.</think><answer>42</answer>")
    assert turn.kind == "answer" and turn.answer == "42" and "<tool_call>" in (turn.think or "")


def test_empty_think_is_allowed() -> None:
    assert parse_turn("<think></think><answer>x</answer>").think == ""


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "empty turn"),
        ("   \n", "empty turn"),
        ("I think the answer is 4.", "no <answer> or <tool_call>: 'I think the answer is 4.'"),
        ("<think>hmm</think>", "no <answer> or <tool_call>"),
        ("<think>hmm<answer>4</answer>", "unclosed <think>"),
        ("hmm</think><answer>4</answer>", "</think> without <think>"),
        ("<think>a</think><think>b</think><answer>4</answer>", "2 <think> blocks, expected one"),
        ("</think>x<think><answer>4</answer>", "</think> without <think>"),
        ("<answer>1<answer>2</answer>", "2 <answer> blocks, expected one"),
        ("<answer>1<tool_call></answer>", "both <answer> and <tool_call>"),
        ('<tool_call>{"name": "a", "arguments": {}} please</tool_call>', "text after the tool_call JSON: 'please'"),
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call><answer>4</answer>', "both <answer> and <tool_call>"),
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call> done', "text after </tool_call>: 'done'"),
        (
            '<tool_call>{"name": "a", "arguments": {"q": 1</tool_call>',
            "tool_call JSON invalid at char 34: Expecting ',' delimiter",
        ),
        ("</tool_call>", "</tool_call> without <tool_call>"),
        ("Sure! <think>a</think><answer>4</answer>", "text before <think>: 'Sure!'"),
        ("<answer>4</answer> because reasons", "text after </answer>: 'because reasons'"),
        ("Answer: <answer>4</answer>", "text before <answer>: 'Answer:'"),
        ("<answer>4", "unclosed <answer>"),
        ("4</answer>", "</answer> without <answer>"),
        ("<answer>  </answer>", "empty <answer>"),
        ("<answer>1</answer><answer>2</answer>", "2 <answer> blocks, expected one"),
        ('<answer>4</answer><tool_call>{"name": "a", "arguments": {}}</tool_call>', "both <answer> and <tool_call>"),
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call>' * 2, "2 <tool_call> blocks, expected one"),
        ('<tool_call>{"name": "a", "arguments": {}}', "unclosed <tool_call>"),
        (
            '<tool_call>{"name": "search", "arguments": {"query": }}</tool_call>',
            "tool_call JSON invalid at char 42: Expecting value",
        ),
        ("<tool_call></tool_call>", "tool_call JSON invalid at char 0: Expecting value"),
        ('<tool_call>["search", {}]</tool_call>', "tool_call JSON must be an object, got list"),
        ('<tool_call>{"name": "s", "arguments": {}, "id": 1}</tool_call>', "tool_call JSON has unexpected keys ['id']"),
        ('<tool_call>{"arguments": {}}</tool_call>', "tool_call 'name' missing or not a non-empty string"),
        ('<tool_call>{"name": 3, "arguments": {}}</tool_call>', "tool_call 'name' missing or not a non-empty string"),
        ('<tool_call>{"name": "s"}</tool_call>', "tool_call 'arguments' missing or not a JSON object"),
        (
            '<tool_call>{"name": "s", "arguments": "q=1"}</tool_call>',
            "tool_call 'arguments' missing or not a JSON object",
        ),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "tool_call JSON invalid: RecursionError"),
        ('<tool_call>{"name": "s", "arguments": {"k": ' + "9" * 5000 + "}}</tool_call>", "tool_call JSON invalid"),
    ],
)
def test_malformed_turns_say_why(text: str, error: str) -> None:
    turn = parse_turn(text)
    assert turn.kind == "malformed" and not turn.is_valid
    assert turn.error is not None and turn.error.startswith(error), turn.error
    assert turn.tool_name is None and turn.tool_arguments is None and turn.answer is None


@pytest.mark.parametrize("value", [None, 42, b"<answer>x</answer>", ["<answer>x</answer>"]])
def test_non_text_input_is_malformed(value: Any) -> None:
    turn = parse_turn(value)
    assert turn.kind == "malformed" and "not text" in (turn.error or "")


def test_tags_inside_argument_strings_are_plain_text() -> None:
    text = (
        '<tool_call>{"name": "visit", "arguments": {"url": "u", "goal": "find </tool_call> and <answer>"}}</tool_call>'
    )
    turn = parse_turn(text)
    assert turn.kind == "tool_call" and turn.tool_arguments == {"url": "u", "goal": "find </tool_call> and <answer>"}


def test_think_is_kept_on_a_malformed_turn() -> None:
    turn = parse_turn("<think>plan</think> <answer></answer>")
    assert turn.kind == "malformed" and turn.think == "plan"


def test_formatting_helpers() -> None:
    assert format_tool_result(ToolOutput.success("page text")) == "page text"
    assert format_tool_result(ToolOutput.failure("no page has this url")) == "Error: no page has this url"
    feedback = format_parse_error(parse_turn("hello"))
    assert "no <answer> or <tool_call>" in feedback and TURN_FORMAT_INSTRUCTIONS in feedback
    assert parse_turn(format_answer("Zai", think="easy")) == ParsedTurn(kind="answer", think="easy", answer="Zai")


# Property tests: the parser survives anything and every result is consistent.

TAGS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>"]
FRAGMENTS = TAGS + [
    '{"name": "search", "arguments": {"query": "x"}}',
    '{"name": ',
    '"arguments": {}',
    "{",
    "}",
    "[",
    '"',
    ":",
    ",",
    "null",
    "42",
    " ",
    "\n",
    "text",
    "<",
    ">",
    "/",
    "\\u0000",
    "\x00",
    "é",
    "🙂",
]


def check_consistent(turn: ParsedTurn) -> None:
    assert turn.kind in ("tool_call", "answer", "malformed")
    if turn.kind == "malformed":
        assert isinstance(turn.error, str) and turn.error and not turn.error.startswith(INTERNAL_ERROR)
        assert turn.tool_name is None and turn.tool_arguments is None and turn.answer is None
    else:
        assert turn.error is None
    if turn.kind == "tool_call":
        assert isinstance(turn.tool_name, str) and turn.tool_name.strip() and isinstance(turn.tool_arguments, dict)
    if turn.kind == "answer":
        assert isinstance(turn.answer, str) and turn.answer == turn.answer.strip() and turn.answer


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_any_text_parses_without_crashing(text: str) -> None:
    check_consistent(parse_turn(text))


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=25).map("".join))
def test_tag_soup_parses_without_crashing(text: str) -> None:
    check_consistent(parse_turn(text))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=10,
)
plain_text = st.text(max_size=60).filter(lambda s: not any(tag in s for tag in TAGS))


@settings(max_examples=300, deadline=None)
@given(
    name=plain_text.filter(lambda s: s.strip()),
    arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    think=st.none() | plain_text,
)
def test_formatted_tool_calls_round_trip(name: str, arguments: dict[str, Any], think: str | None) -> None:
    turn = parse_turn(format_tool_call(name, arguments, think=think))
    assert turn.kind == "tool_call", turn.error
    assert (turn.tool_name, turn.tool_arguments) == (name, arguments)
    assert turn.think == (None if think is None else think.strip())


@settings(max_examples=300, deadline=None)
@given(
    answer=plain_text.filter(lambda s: s.strip()), think=st.none() | plain_text, pad=st.sampled_from(["", " ", "\n\n"])
)
def test_formatted_answers_round_trip(answer: str, think: str | None, pad: str) -> None:
    turn = parse_turn(pad + format_answer(answer, think=think) + pad)
    assert turn.kind == "answer" and turn.answer == answer.strip()
