"""One assistant turn: optional `<think>…</think>`, then exactly one `<tool_call>{json}</tool_call>` or
`<answer>…</answer>` (docs/method.md, turn format). Tool output returns as a `tool` message.

`parse_turn` accepts any model output and never raises: a turn that breaks the format comes back as
kind "malformed" with an `error` saying why (this feeds r_format and the feedback the agent gets).
Whitespace around and between blocks is allowed; any other text outside the blocks is not. The
parser reads left to right: a think block only counts as the turn's first block, and a tool call's
JSON is decoded as a value, so tags inside thoughts or inside argument strings are plain text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from mgrpo_actors.tools.base import ToolOutput

__all__ = [
    "TURN_FORMAT_INSTRUCTIONS",
    "ParsedTurn",
    "TurnKind",
    "format_answer",
    "format_parse_error",
    "format_tool_call",
    "format_tool_result",
    "parse_turn",
]

log = structlog.get_logger(__name__)

TurnKind = Literal["tool_call", "answer", "malformed"]
THINK = ("<think>", "</think>")
TOOL_CALL = ("<tool_call>", "</tool_call>")
ANSWER = ("<answer>", "</answer>")
TAGS = (*THINK, *TOOL_CALL, *ANSWER)
INTERNAL_ERROR = "internal parser error"

TURN_FORMAT_INSTRUCTIONS = (
    "Each of your turns may start with your reasoning inside <think>...</think>. Then write exactly one of:\n"
    '- a tool call: <tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>\n'
    "- your final answer: <answer>...</answer>\n"
    "Write nothing outside these blocks. A tool's output comes back in the next message."
)


@dataclass(frozen=True)
class ParsedTurn:
    """What one assistant turn asked for, or why it could not be read."""

    kind: TurnKind  # tool_call | answer | malformed
    think: str | None = None  # text inside <think>…</think>, if the turn had it
    tool_name: str | None = None  # set when kind == "tool_call"
    tool_arguments: dict[str, Any] | None = None  # set when kind == "tool_call"
    answer: str | None = None  # set when kind == "answer", stripped
    error: str | None = None  # why the turn is malformed; None otherwise

    @property
    def is_valid(self) -> bool:
        return self.kind != "malformed"


class _Malformed(Exception):
    """Internal: the turn breaks the format; the message is the reason."""


def _preview(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _first_tag(text: str) -> tuple[int, str] | None:
    """Position and name of the earliest format tag in `text`, if any."""
    found = [(text.find(tag), tag) for tag in TAGS if tag in text]
    return min(found) if found else None


def _split_think(text: str) -> tuple[str | None, str]:
    """(think text or None, the rest of the turn). A think block counts only as the turn's first block."""
    first = _first_tag(text)
    if first is None or first[1] not in THINK:
        return None, text
    position, tag = first
    if tag == THINK[1]:
        raise _Malformed("</think> without <think>")
    if text[:position].strip():
        raise _Malformed(f"text before <think>: {_preview(text[:position].strip())}")
    close = text.find(THINK[1], position)
    if close < 0:
        raise _Malformed("unclosed <think>")
    return text[position + len(THINK[0]) : close].strip(), text[close + len(THINK[1]) :]


def _after_block(tail: str, tags: tuple[str, str]) -> None:
    """Only whitespace may follow the action block."""
    if tags[0] in tail:
        raise _Malformed(f"2 {tags[0]} blocks, expected one")
    other = ANSWER[0] if tags == TOOL_CALL else TOOL_CALL[0]
    if other in tail:
        raise _Malformed("both <answer> and <tool_call>")
    if tail.strip():
        raise _Malformed(f"text after {tags[1]}: {_preview(tail.strip())}")


def _answer(body: str) -> str:
    """The answer text of `body`, which starts right after <answer>."""
    close = body.find(ANSWER[1])
    if close < 0:
        raise _Malformed("unclosed <answer>")
    inside, tail = body[:close], body[close + len(ANSWER[1]) :]
    if ANSWER[0] in inside:
        raise _Malformed("2 <answer> blocks, expected one")
    if TOOL_CALL[0] in inside:
        raise _Malformed("both <answer> and <tool_call>")
    _after_block(tail, ANSWER)
    if not inside.strip():
        raise _Malformed("empty <answer>")
    return inside.strip()


def _decode_json(body: str) -> tuple[Any, str]:
    """The JSON value at the start of `body` (after whitespace) and the text after it.

    Decoding the value itself, rather than cutting at the first </tool_call>, lets arguments hold any
    text, tags included.
    """
    start = len(body) - len(body.lstrip())
    try:
        value, end = json.JSONDecoder().raw_decode(body, start)
    except json.JSONDecodeError as exc:
        if TOOL_CALL[1] not in body:
            raise _Malformed("unclosed <tool_call>") from None
        raise _Malformed(f"tool_call JSON invalid at char {exc.pos - start}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # e.g. nesting too deep, integer too long
        raise _Malformed(f"tool_call JSON invalid: {type(exc).__name__}: {str(exc)[:80]}") from None
    return value, body[end:]


def _tool_call(body: str) -> tuple[str, dict[str, Any]]:
    """(name, arguments) of `body`, which starts right after <tool_call>."""
    call, rest = _decode_json(body)
    if not rest.strip():
        raise _Malformed("unclosed <tool_call>")
    if not rest.lstrip().startswith(TOOL_CALL[1]):
        extra = rest.split(TOOL_CALL[1], 1)[0].strip()
        raise _Malformed(f"text after the tool_call JSON: {_preview(extra)}")
    _after_block(rest.lstrip()[len(TOOL_CALL[1]) :], TOOL_CALL)
    if not isinstance(call, dict):
        raise _Malformed(f"tool_call JSON must be an object, got {type(call).__name__}")
    unknown = sorted(set(call) - {"name", "arguments"})
    if unknown:
        raise _Malformed(f"tool_call JSON has unexpected keys {unknown}; expected 'name' and 'arguments'")
    name, arguments = call.get("name"), call.get("arguments")
    if not isinstance(name, str) or not name.strip():
        raise _Malformed("tool_call 'name' missing or not a non-empty string")
    if not isinstance(arguments, dict):
        raise _Malformed("tool_call 'arguments' missing or not a JSON object")
    return name, arguments


def _parse(text: str) -> ParsedTurn:
    think: str | None = None
    try:
        if not text.strip():
            raise _Malformed("empty turn")
        think, rest = _split_think(text)
        first = _first_tag(rest)
        if first is None:
            hint = f": {_preview(rest.strip())}" if rest.strip() else ""
            raise _Malformed(f"no <answer> or <tool_call>{hint}")
        position, tag = first
        if tag == THINK[0]:
            raise _Malformed("2 <think> blocks, expected one")
        if tag in (THINK[1], TOOL_CALL[1], ANSWER[1]):
            raise _Malformed(f"{tag} without <{tag[2:]}")
        if rest[:position].strip():
            raise _Malformed(f"text before {tag}: {_preview(rest[:position].strip())}")
        body = rest[position + len(tag) :]
        if tag == ANSWER[0]:
            return ParsedTurn(kind="answer", think=think, answer=_answer(body))
        name, arguments = _tool_call(body)
        return ParsedTurn(kind="tool_call", think=think, tool_name=name, tool_arguments=arguments)
    except _Malformed as exc:
        return ParsedTurn(kind="malformed", think=think, error=str(exc))


def parse_turn(text: Any) -> ParsedTurn:
    """Parse one assistant turn; never raises, whatever `text` is."""
    if not isinstance(text, str):
        return ParsedTurn(kind="malformed", error=f"turn is {type(text).__name__}, not text")
    try:
        return _parse(text)
    except Exception as exc:  # the contract is "never raises"; a bug here must not end a rollout
        log.error("turn parser bug", error=repr(exc), turn=text[:200])
        return ParsedTurn(kind="malformed", error=f"{INTERNAL_ERROR}: {type(exc).__name__}")


def _with_think(body: str, think: str | None) -> str:
    return body if think is None else f"<think>{think}</think>\n{body}"


def format_tool_call(name: str, arguments: dict[str, Any], think: str | None = None) -> str:
    """A well-formed tool-call turn (for demonstrations, prompts and tests)."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return _with_think(f"{TOOL_CALL[0]}{payload}{TOOL_CALL[1]}", think)


def format_answer(answer: str, think: str | None = None) -> str:
    """A well-formed answer turn."""
    return _with_think(f"{ANSWER[0]}{answer}{ANSWER[1]}", think)


def format_tool_result(result: ToolOutput) -> str:
    """The content of the `tool` message that answers a tool call."""
    return result.content if result.ok else f"Error: {result.error}"


def format_parse_error(turn: ParsedTurn) -> str:
    """The content of the message that tells the agent its last turn could not be read."""
    return f"Error: your last turn could not be read ({turn.error}). {TURN_FORMAT_INSTRUCTIONS}"
