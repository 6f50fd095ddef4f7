"""`AgentEpisode`: one agent's multi-turn episode as a step function, driven from outside one turn at a time.

    prompt = episode.next_prompt_ids()      # token ids to generate from
    action = episode.apply(generation)      # ToolCall | Answer | Malformed; the turn enters the trajectory
    episode.add_tool_result(text)           # unless episode.done: the tool's output (or the parse error)

Token-in/token-out (agents/trajectory.py): the ids the engine sampled enter the trajectory as they are
(loss mask 1, behaviour logprobs); tool outputs, parse errors and budget notes enter with mask 0. The
text that is parsed is decoded from the sampled ids and is never tokenised back into the loss.

A turn ends at its first complete, valid action block, as if the closing tags were stop strings: where
the tags are single token ids the engine stops on them; the hf engine's own decoding loop also stops at the id that
completes the block (SamplingParams.stop_check, ActionStop); whatever was sampled after it is cut off here.

Budgets (docs/method.md §The system being trained: ~20 turns per agent). Before each tool output is added
the episode checks that the budgets leave room for one more ordinary turn and a final answer after it;
when they do not (the next turn would be the last allowed, or the context would not hold both), the
tool output is cut to fit, an early-stop note asking for the final answer is appended to it, and the
next turn is the final one: whatever it is, the episode ends after it. Every turn, the final one
included, gets its whole max_new_tokens_per_turn.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tokenizers.decoders import DecodeStream
from transformers import PreTrainedTokenizerBase

from mgrpo_actors.agents.trajectory import TokenTrajectory, TrajectoryBuilder, encode_plain, encode_template
from mgrpo_actors.agents.turn_format import ParsedTurn, format_parse_error, parse_turn
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.engines.base import Generation, SamplingParams

__all__ = [
    "ACTION_CLOSE_TAGS",
    "Action",
    "AgentEpisode",
    "Answer",
    "BUDGET_NOTES",
    "ContextBudgetError",
    "EpisodeRecord",
    "Malformed",
    "StopReason",
    "ToolCall",
    "TRUNCATION_NOTE",
    "TurnRecord",
    "ActionStop",
    "action_stop",
    "action_stop_ids",
    "cut_after_action",
]

StopReason = Literal["answer", "turns", "context"]  # answered, or the turn / context budget ran out

BUDGET_NOTES: dict[StopReason, str] = {
    "turns": "You have reached the turn limit. Do not call any more tools: "
    "write your final answer now, inside <answer>...</answer>.",
    "context": "Your context is almost full. Do not call any more tools: "
    "write your final answer now, inside <answer>...</answer>.",
}
TRUNCATION_NOTE = "\n[cut to fit the context budget]"
ACTION_CLOSE_TAGS = ("</tool_call>", "</answer>")
_CLOSE_TAG = re.compile("|".join(re.escape(tag) for tag in ACTION_CLOSE_TAGS))
# The final turn's reserve counts the template's whole closing text; the closing actually appended is
# its tail after a sampled stop token, which a tokenizer may split differently: keep a margin.
_TOKEN_MARGIN = 8


class ContextBudgetError(ValueError):
    """The opening messages leave no room for a turn within max_context_tokens."""


@dataclass(frozen=True)
class ToolCall:
    """The turn called a tool (M's `delegate` included)."""

    call_id: str  # "<episode id>.t<turn>", unique within the query
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Answer:
    """The turn gave the final answer."""

    text: str  # inside <answer>…</answer>, stripped


@dataclass(frozen=True)
class Malformed:
    """The turn broke the turn format; `feedback` is what the agent reads next."""

    error: str  # why the turn could not be read (turn_format.parse_turn)
    feedback: str  # the tool message that tells the agent


Action = ToolCall | Answer | Malformed


@dataclass(frozen=True)
class TurnRecord:
    """One turn as a person reads it in a transcript."""

    text: str  # the generation, decoded from the sampled ids (special tokens dropped)
    action: Action
    finish_reason: str  # "stop" or "length" (the turn ran out of tokens)
    num_tokens: int  # tokens sampled in this turn
    tool_result: str | None = None  # the tool message that followed, as appended (cut and noted if so)
    tool_ok: bool | None = None  # whether that tool call succeeded; None if no tool message followed


@dataclass(frozen=True)
class EpisodeRecord:
    """A finished episode: its trajectory and what scoring and transcripts need."""

    episode_id: str
    trajectory: TokenTrajectory
    turns: tuple[TurnRecord, ...]
    turn_errors: tuple[str | None, ...]  # per turn: None if it parsed, else why not (feeds r_format)
    answer: str | None  # the final answer, None if the episode ended without one
    stop_reason: StopReason


def _decode_with_ends(ids: Sequence[int], tokenizer: PreTrainedTokenizerBase) -> tuple[str, list[int]]:
    """The text of `ids` (special tokens dropped) and, per id, where in it that id's text ends.

    Incremental decoding, linear in len(ids): each id is decoded once, and an id that ends inside a
    multi-byte character gets its text with the id that completes it.
    """
    stream = DecodeStream(skip_special_tokens=True)
    chunks: list[str] = []
    ends: list[int] = []
    length = 0
    for token in ids:
        chunk = stream.step(tokenizer.backend_tokenizer, token) or ""
        chunks.append(chunk)
        length += len(chunk)
        ends.append(length)
    return "".join(chunks), ends


def cut_after_action(generation: Generation, tokenizer: PreTrainedTokenizerBase) -> tuple[Generation, str]:
    """(the generation up to the id that completes its first valid action block, the text to parse).

    Equivalent to sampling with the closing tags as stop strings: each kept token's logprob is
    conditioned on its prefix only, so the cut turn is distributed exactly as a stopped one would be.
    Only prefixes that end in a closing tag and parse as a whole turn count, so a tag inside a
    thought or inside a JSON string does not cut the turn short. A tokenizer may merge a tag's ">" with
    what follows (SmolLM2 has ">.", ">,", "></"): that id is kept whole, as sampled, and the text is
    cut at the tag, as vLLM does with stop strings. No valid block: the generation and its whole text.
    """
    ids = generation.token_ids
    text, ends = _decode_with_ends(ids, tokenizer)
    found = _first_action(text, ends)
    if found is None:
        return generation, text
    keep, turn = found
    if keep == len(ids):
        return generation, turn
    return Generation(ids[:keep], generation.logprobs[:keep].copy(), "stop", generation.policy_version), turn


def _first_action(text: str, ends: Sequence[int]) -> tuple[int, str] | None:
    """(ids up to the one that completes the first valid action block, the turn's text up to it), or None."""
    for tag in _CLOSE_TAG.finditer(text):
        turn = text[: tag.end()]
        if parse_turn(turn).is_valid:
            return bisect.bisect_left(ends, tag.end()) + 1, turn  # the first id whose text reaches the tag's end
    return None


class ActionStop:
    """The engine's StopCheck (engines/base.py) for an agent's turn: True once the sampled ids complete a valid action
    block, the very id where cut_after_action would cut, so the engine stops sampling a tail that would be cut (for
    tokenizers whose closing tags are not single ids, e.g. SmolLM2's). `candidates`: the ids whose token string holds
    ">" (the engine asks again for the few ids after one: a ">" that shares a token with a character's first bytes
    shows in the text only with the id that completes the character)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, candidates: frozenset[int]) -> None:
        self._tokenizer = tokenizer
        self.candidates = candidates

    def __call__(self, ids: Sequence[int]) -> bool:
        return _first_action(*_decode_with_ends(ids, self._tokenizer)) is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActionStop) and other._tokenizer is self._tokenizer

    def __hash__(self) -> int:
        return id(self._tokenizer)


# tokenizer -> its ActionStop candidates, freed with the tokenizer
_CANDIDATES: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, frozenset[int]] = weakref.WeakKeyDictionary()


def _candidates(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return frozenset(i for i, piece in enumerate(pieces) if ">" in (piece or ""))


def action_stop(tokenizer: PreTrainedTokenizerBase) -> ActionStop:
    """The ActionStop of `tokenizer` (its candidates found once per tokenizer)."""
    try:
        candidates = _CANDIDATES.get(tokenizer)
        if candidates is None:
            candidates = _CANDIDATES[tokenizer] = _candidates(tokenizer)
    except TypeError:  # a tokenizer that cannot be weakly referenced: found again for each episode
        candidates = _candidates(tokenizer)
    return ActionStop(tokenizer, candidates)


def action_stop_ids(tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """The closing tags that are single ids: the engine can stop on them instead of sampling a tail to cut."""
    encoded = [encode_template(tokenizer, tag) for tag in ACTION_CLOSE_TAGS]
    return tuple(sorted({ids[0] for ids in encoded if len(ids) == 1}))


def _action(turn: ParsedTurn, call_id: str) -> Action:
    if turn.kind == "answer":
        assert turn.answer is not None
        return Answer(text=turn.answer)
    if turn.kind == "tool_call":
        assert turn.tool_name is not None and turn.tool_arguments is not None
        return ToolCall(call_id=call_id, name=turn.tool_name, arguments=turn.tool_arguments)
    assert turn.error is not None
    return Malformed(error=turn.error, feedback=format_parse_error(turn))


def _final_text(text: str, note: str, cut: bool) -> str:
    """The tool message before the final turn: the (possibly cut) output, then the early-stop note."""
    return f"{text}{TRUNCATION_NOTE if cut else ''}\n\n{note}"


class AgentEpisode:
    """One agent's episode; the driver batches many of them on one engine."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        opening: Sequence[Mapping[str, str]],
        cfg: AgentConfig,
        episode_id: str,
        tool_names: Sequence[str],
        rollout_index: int = 0,
    ) -> None:
        """opening: system + user messages; tool_names: what this agent may call (others get an error)."""
        self.cfg = cfg
        self.episode_id = episode_id
        self.tool_names = tuple(tool_names)
        self.rollout_index = rollout_index
        self._tokenizer = tokenizer
        self._builder = TrajectoryBuilder(tokenizer, opening)
        if len(self._builder) + cfg.max_new_tokens_per_turn > cfg.max_context_tokens:
            raise ContextBudgetError(
                f"episode {episode_id}: the opening prompt has {len(self._builder)} tokens; with "
                f"max_new_tokens_per_turn={cfg.max_new_tokens_per_turn} it exceeds "
                f"max_context_tokens={cfg.max_context_tokens}"
            )
        self._stop_ids = action_stop_ids(tokenizer) if cfg.stop_after_action else ()
        self._stop_check = action_stop(tokenizer) if cfg.stop_after_action else None
        # What a tool output cut to nothing but the notes takes: _cut_to_fit can always fall back to it.
        self._final_note_tokens = self._builder.longest_tool_output(
            tuple(_final_text("", note, cut=True) for note in BUDGET_NOTES.values())
        )
        self._turns: list[TurnRecord] = []
        self._turn_errors: list[str | None] = []
        self._answer: str | None = None
        self._stop_reason: StopReason | None = None
        # Why the next turn is the last one; None while the budgets allow more.
        self._final_reason: StopReason | None = None
        if cfg.max_turns == 1:
            self._final_reason = "turns"
        elif len(self._builder) + cfg.max_new_tokens_per_turn + self._final_turn_room() > cfg.max_context_tokens:
            self._final_reason = "context"

    @property
    def done(self) -> bool:
        """The episode answered, or its final turn is over."""
        return self._stop_reason is not None

    @property
    def turns(self) -> tuple[TurnRecord, ...]:
        """The turns so far."""
        return tuple(self._turns)

    def next_prompt_ids(self) -> list[int]:
        """The token ids the next turn is generated from."""
        if self.done:
            raise ValueError(f"episode {self.episode_id} is done")
        return self._builder.context_ids()

    def sampling_params(self, seed: int | None) -> SamplingParams:
        """Sampling for the next turn: the turn budget, or what is left of the context if less."""
        room = self.cfg.max_context_tokens - len(self._builder)
        max_new_tokens = min(self.cfg.max_new_tokens_per_turn, room)
        params = self.cfg.sampling_params(max_new_tokens=max_new_tokens, seed=seed, stop_token_ids=self._stop_ids)
        return dataclasses.replace(params, stop_check=self._stop_check)

    def apply(self, generation: Generation) -> Action:
        """Append the sampled turn (mask 1) and read what it asks for."""
        if self.done:
            raise ValueError(f"episode {self.episode_id} is done")
        if self.cfg.stop_after_action:
            generation, text = cut_after_action(generation, self._tokenizer)
        else:
            text = self._tokenizer.decode(generation.token_ids, skip_special_tokens=True)
        self._builder.add_generation(generation)
        turn = parse_turn(text)
        action = _action(turn, call_id=f"{self.episode_id}.t{len(self._turns)}")
        self._turns.append(TurnRecord(text, action, generation.finish_reason, len(generation.token_ids)))
        self._turn_errors.append(turn.error)
        if isinstance(action, Answer):
            self._answer, self._stop_reason = action.text, "answer"
        elif self._final_reason is not None:
            self._stop_reason = self._final_reason
        return action

    def _final_turn_room(self) -> int:
        """Tokens a tool output cut down to its notes and the final turn after it take at most."""
        return self._final_note_tokens + self.cfg.max_new_tokens_per_turn + _TOKEN_MARGIN

    def _fits(self, tool_tokens: int, then: int) -> bool:
        """Whether a tool output of `tool_tokens`, a whole turn and `then` more tokens fit the context."""
        needed = len(self._builder) + tool_tokens + self.cfg.max_new_tokens_per_turn + then
        return needed <= self.cfg.max_context_tokens

    def _cut_to_fit(self, text: str, note: str) -> str:
        """`text` and the early-stop note, `text` cut until the final turn keeps its whole token budget.

        Measured on the ids the tool message will really have (wrapping included); binary search over
        how many of the text's ids to keep, since a cut text can re-tokenise a little differently.
        """
        whole = _final_text(text, note, cut=False)
        if self._fits(len(self._builder.tool_output_ids(whole)), then=0):
            return whole
        ids = encode_plain(self._tokenizer, text)

        def cut(keep: int) -> str:
            return _final_text(self._tokenizer.decode(ids[:keep]), note, cut=True)

        fits, too_long = 0, len(ids)  # keeping nothing fits: the final-turn reserve guarantees it
        while too_long - fits > 1:
            middle = (fits + too_long) // 2
            if self._fits(len(self._builder.tool_output_ids(cut(middle))), then=0):
                fits = middle
            else:
                too_long = middle
        return cut(fits)

    def add_tool_result(self, text: str, ok: bool = True) -> None:
        """Append a tool's output (mask 0), with an early-stop note if the budgets leave one turn.

        ok: whether the call succeeded (False for errors and parse-error feedback); kept in the turn record.
        """
        if self.done:
            raise ValueError(f"episode {self.episode_id} is done")
        if len(self._turns) >= self.cfg.max_turns - 1:
            self._final_reason = "turns"
        elif not self._fits(len(self._builder.tool_output_ids(text)), then=self._final_turn_room()):
            self._final_reason = "context"
        if self._final_reason is not None:
            text = self._cut_to_fit(text, BUDGET_NOTES[self._final_reason])
        self._builder.add_tool_output(text)
        last = self._turns[-1]
        self._turns[-1] = dataclasses.replace(last, tool_result=text, tool_ok=ok)

    def record(self) -> EpisodeRecord:
        """The finished episode."""
        if not self.done:
            raise ValueError(f"episode {self.episode_id} is still running")
        assert self._stop_reason is not None
        return EpisodeRecord(
            episode_id=self.episode_id,
            trajectory=self._builder.finish(),
            turns=tuple(self._turns),
            turn_errors=tuple(self._turn_errors),
            answer=self._answer,
            stop_reason=self._stop_reason,
        )
