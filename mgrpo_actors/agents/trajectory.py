"""Token-in/token-out trajectories: the exact ids an agent saw and sampled, with loss mask and logprobs.

The chat template is applied once, to the opening messages (system + user). From then on ids only
grow: each engine generation is appended as sampled (loss mask 1, its behaviour logprobs), and each
tool output is rendered with the template's own tool-turn wrapping, tokenised by itself and appended
(loss mask 0, logprob 0) together with the header that opens the next assistant turn. Earlier text is
never re-tokenised, so the learner trains on exactly the tokens the policy produced.

Only the template writes control tokens. Message contents and tool outputs (web pages, S's findings,
M's task) are untrusted text: a literal "<|im_end|>" in a page is tokenised as text, never as the
control id, so no page can close a turn or open a fake one.

The wrapping is learned from the template by rendering marker messages, e.g. for ChatML:
  after the assistant's content  "<|im_end|>\\n"  (the model usually generated "<|im_end|>" itself)
  around a tool output           "<|im_start|>tool\\n" … "<|im_end|>\\n<|im_start|>assistant\\n"
"""

from __future__ import annotations

import threading
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedTokenizerBase

from mgrpo_actors.engines.base import Generation

__all__ = [
    "ChatTurnWrapping",
    "TokenTrajectory",
    "TrajectoryBuilder",
    "encode_opening",
    "encode_plain",
    "encode_template",
    "opening_of",
]

Message = Mapping[str, str]

_ASSISTANT_MARK = "\x00ASSISTANT-CONTENT\x00"
_TOOL_MARK = "\x00TOOL-CONTENT\x00"


def _render(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        [dict(message) for message in messages], tokenize=False, add_generation_prompt=generation_prompt
    )


def encode_template(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Ids of text the chat template wrote: its control tokens become their ids."""
    # Templates write their own markers (BOS included where a model wants it): add nothing here.
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def encode_plain(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Ids of untrusted text (a tool output, S's findings): a literal control token stays plain text."""
    return tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def encode_opening(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message]) -> list[int]:
    """The template's rendering of `messages` with the assistant header, message contents as plain text."""
    return tokenizer.apply_chat_template(
        [dict(message) for message in messages],
        tokenize=True,
        add_generation_prompt=True,
        sanitize_control_tokens=True,  # control tokens inside contents are encoded as text
        return_dict=False,
    )


@dataclass(frozen=True)
class ChatTurnWrapping:
    """The template text that closes an assistant turn and that wraps a tool output."""

    assistant_close: str  # after an assistant message's content, e.g. "<|im_end|>\n"
    tool_open: str  # before a tool output, e.g. "<|im_start|>tool\n"
    tool_close: str  # after a tool output through the next assistant header: "<|im_end|>\n<|im_start|>assistant\n"

    @classmethod
    def from_template(cls, tokenizer: PreTrainedTokenizerBase, opening: Sequence[Message]) -> ChatTurnWrapping:
        """Learn the wrapping by rendering marker turns after the opening messages."""
        assistant = [*opening, {"role": "assistant", "content": _ASSISTANT_MARK}]
        before_tool = _render(tokenizer, assistant, generation_prompt=False)
        with_tool = _render(tokenizer, [*assistant, {"role": "tool", "content": _TOOL_MARK}], generation_prompt=True)
        if not with_tool.startswith(before_tool) or _TOOL_MARK not in with_tool:
            raise ValueError("the chat template does not render a tool turn as an append after the assistant turn")
        tool_open, tool_close = with_tool[len(before_tool) :].split(_TOOL_MARK)
        assistant_close = before_tool[before_tool.rindex(_ASSISTANT_MARK) + len(_ASSISTANT_MARK) :]
        return cls(assistant_close=assistant_close, tool_open=tool_open, tool_close=tool_close)


@dataclass(frozen=True)
class TokenTrajectory:
    """One agent's whole rollout as token arrays, ready for the wire and the learner."""

    token_ids: np.ndarray  # int32 [T]: prompt, generations and tool outputs, in order
    loss_mask: np.ndarray  # uint8 [T]: 1 exactly on the tokens the agent sampled
    behaviour_logprobs: np.ndarray  # float32 [T]: logprob of each sampled token, 0 elsewhere
    prompt_len: int  # tokens of the opening (system + user) prompt
    policy_version: int  # oldest policy version among the turns (what staleness is measured by)
    turn_spans: tuple[tuple[int, int], ...]  # [start, end) of each generation in token_ids
    turn_policy_versions: tuple[int, ...]  # policy version of each generation
    finish_reasons: tuple[str, ...]  # finish reason of each generation


# Openings rendered and tokenised, per tokenizer (freed with it), newest last: a step's K rollouts of a query open
# alike, and rendering the template took about 1.3 ms an episode (64 episodes a step of `mgrpo bench steps`). The ids
# are kept as int32 arrays: a 2,000-token opening takes 8 KB (as a tuple of ints, about 70 KB).
Opening = tuple[ChatTurnWrapping, Sequence[int]]
_OPENINGS: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, OrderedDict[tuple, Opening]] = weakref.WeakKeyDictionary()
_OPENINGS_KEPT = 128  # per tokenizer: more than a step's queries (sub-agents' openings differ: kept, rarely used)
_OPENINGS_LOCK = threading.Lock()


def _computed(tokenizer: PreTrainedTokenizerBase, opening: Sequence[Message]) -> Opening:
    return ChatTurnWrapping.from_template(tokenizer, opening), array("i", encode_opening(tokenizer, opening))


def opening_of(tokenizer: PreTrainedTokenizerBase, opening: Sequence[Message]) -> Opening:
    """The chat template's turn wrapping after `opening` and the opening's ids (encode_opening), each computed once
    per tokenizer and opening (the newest _OPENINGS_KEPT kept)."""
    try:
        key = tuple(tuple(sorted(message.items())) for message in opening)
        hash(key)
    except TypeError:  # a message with values that are not strings (a list of parts): computed each time
        return _computed(tokenizer, opening)
    with _OPENINGS_LOCK:
        try:
            kept = _OPENINGS.setdefault(tokenizer, OrderedDict())
        except TypeError:  # a tokenizer that cannot be weakly referenced: computed each time
            kept = OrderedDict()
        found = kept.get(key)
        if found is not None:
            kept.move_to_end(key)
            return found[0], array("i", found[1])  # a copy: the kept ids serve the next episode too
    found = _computed(tokenizer, opening)
    with _OPENINGS_LOCK:
        kept[key] = found
        while len(kept) > _OPENINGS_KEPT:
            kept.popitem(last=False)
    return found[0], array("i", found[1])


# The template's pieces around tool outputs (a few short strings per tokenizer), tokenised once.
_PIECES: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, dict[str, tuple[int, ...]]] = weakref.WeakKeyDictionary()
_PIECES_KEPT = 64  # per tokenizer: more than any template writes
# tokenizer -> {(its turn wrapping, texts): longest_tool_output}
_LONGEST: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, dict[tuple[ChatTurnWrapping, tuple[str, ...]], int]]
_LONGEST = weakref.WeakKeyDictionary()


def _template_piece(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[int, ...]:
    """encode_template(tokenizer, text) for the template's own pieces, computed once per tokenizer and piece."""
    with _OPENINGS_LOCK:
        try:
            pieces = _PIECES.setdefault(tokenizer, {})
        except TypeError:  # a tokenizer that cannot be weakly referenced
            pieces = {}
        found = pieces.get(text)
    if found is None:
        found = tuple(encode_template(tokenizer, text))
        with _OPENINGS_LOCK:
            if len(pieces) < _PIECES_KEPT:
                pieces[text] = found
    return found


class TrajectoryBuilder:
    """Grows one agent's token sequence turn by turn; `context_ids()` is the next engine prompt."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, opening: Sequence[Message]):
        self._tokenizer = tokenizer
        self._wrapping, prompt_ids = opening_of(tokenizer, opening)
        self._ids: list[int] = list(prompt_ids)
        self._mask: list[int] = [0] * len(prompt_ids)
        self._logprobs: list[float] = [0.0] * len(prompt_ids)
        self.prompt_len = len(prompt_ids)
        self._spans: list[tuple[int, int]] = []
        self._versions: list[int] = []
        self._finish_reasons: list[str] = []
        self._awaiting_generation = True

    def _append(self, ids: Sequence[int], mask: int, logprobs: Sequence[float]) -> None:
        self._ids.extend(ids)
        self._mask.extend([mask] * len(ids))
        self._logprobs.extend(logprobs)

    def context_ids(self) -> list[int]:
        """All ids so far: the prompt for the agent's next generation."""
        return list(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def add_generation(self, generation: Generation) -> None:
        """Append what the engine sampled, exactly as sampled (loss mask 1)."""
        if not self._awaiting_generation:
            raise ValueError("a generation must follow the prompt or a tool output, not another generation")
        start = len(self._ids)
        self._append(generation.token_ids, 1, generation.logprobs.tolist())
        self._spans.append((start, len(self._ids)))
        self._versions.append(generation.policy_version)
        self._finish_reasons.append(generation.finish_reason)
        self._awaiting_generation = False

    def _closing_text(self) -> str:
        """What the template puts after the assistant's content, minus the stop token the model already sampled."""
        close = self._wrapping.assistant_close
        last_span = self._spans[-1]
        if self._finish_reasons[-1] == "stop" and last_span[1] > last_span[0]:
            stop_text = self._tokenizer.decode([self._ids[last_span[1] - 1]], skip_special_tokens=False)
            if stop_text and close.startswith(stop_text):
                return close[len(stop_text) :]
        return close

    @property
    def wrapping(self) -> ChatTurnWrapping:
        """The chat template's text around turns after this builder's opening."""
        return self._wrapping

    def _wrapped_ids(self, closing: str, text: str) -> list[int]:
        """Template pieces with their control ids, `text` between them as plain text."""
        return (
            list(_template_piece(self._tokenizer, closing + self._wrapping.tool_open))
            + encode_plain(self._tokenizer, text)
            + list(_template_piece(self._tokenizer, self._wrapping.tool_close))
        )

    def tool_output_ids(self, text: str) -> list[int]:
        """The ids `add_tool_output(text)` would append now."""
        if self._awaiting_generation:
            raise ValueError("a tool output must follow a generation")
        return self._wrapped_ids(self._closing_text(), text)

    def longest_tool_output(self, texts: tuple[str, ...]) -> int:
        """The most tokens any of `texts` takes as a tool output (tool_output_bound): the same for every builder of
        a tokenizer and chat template, found once (an episode's budget notes: 0.65 ms of each episode's start)."""
        with _OPENINGS_LOCK:
            try:
                known = _LONGEST.setdefault(self._tokenizer, {})
            except TypeError:  # a tokenizer that cannot be weakly referenced
                known = {}
            tokens = known.get((self._wrapping, texts))
        if tokens is None:
            tokens = max(self.tool_output_bound(text) for text in texts)
            with _OPENINGS_LOCK:
                if len(known) < _PIECES_KEPT:
                    known[(self._wrapping, texts)] = tokens
        return tokens

    def tool_output_bound(self, text: str) -> int:
        """Tokens `add_tool_output(text)` appends after any generation (the template's whole closing text counted)."""
        return len(self._wrapped_ids(self._wrapping.assistant_close, text))

    def add_tool_output(self, text: str) -> None:
        """Append a tool message and the next assistant header, tokenised by themselves (loss mask 0)."""
        ids = self.tool_output_ids(text)
        self._append(ids, 0, [0.0] * len(ids))
        self._awaiting_generation = True

    def finish(self) -> TokenTrajectory:
        """The trajectory so far, as typed arrays."""
        if not self._spans:
            raise ValueError("a trajectory needs at least one generation")
        return TokenTrajectory(
            token_ids=np.asarray(self._ids, dtype=np.int32),
            loss_mask=np.asarray(self._mask, dtype=np.uint8),
            behaviour_logprobs=np.asarray(self._logprobs, dtype=np.float32),
            prompt_len=self.prompt_len,
            policy_version=min(self._versions),
            turn_spans=tuple(self._spans),
            turn_policy_versions=tuple(self._versions),
            finish_reasons=tuple(self._finish_reasons),
        )
