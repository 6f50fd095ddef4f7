"""`ScriptedEngine`: a RolloutEngine that "samples" the token ids of texts a test script chooses.

It is a test engine for the agents' loop logic (what a turn asks for, budgets, delegation), which tiny
random models almost never exercise because they rarely write a valid tool call. Its ids come from the
real tokenizer, so trajectories, parsing and masks are the real ones; its logprobs are a constant and
mean nothing. The tests that check logprobs against a model use the real tiny models, not this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from transformers import PreTrainedTokenizerBase

from mgrpo_actors.engines.base import Generation, SamplingParams, WeightsSource

__all__ = ["ScriptedBatch", "ScriptedEngine", "assistant_turns", "by_turn"]

SCRIPTED_LOGPROB = -0.25


def assistant_turns(prompt: str) -> int:
    """How many turns the episode of a rendered ChatML prompt has had (0 before the first); a demonstration's
    turns come before the last user message and do not count."""
    return prompt[prompt.rindex("<|im_start|>user") :].count("<|im_start|>assistant") - 1


def by_turn(*turns: str) -> Callable[[str], str]:
    """A script that answers turn i of any episode with turns[i] (the last one repeats)."""
    return lambda prompt: turns[min(assistant_turns(prompt), len(turns) - 1)]


@dataclass
class ScriptedEngine:
    """Answers each prompt with `respond(decoded prompt)`, tokenised, eos appended, ended like a real engine's
    generation: after the first eos or stop id (kept), or at max_new_tokens."""

    tokenizer: PreTrainedTokenizerBase
    respond: Callable[[str], str]
    policy_version: int = 0
    calls: list[tuple[list[list[int]], SamplingParams]] = field(default_factory=list)  # every generate call
    continuous_batching: bool = False  # rollout/driver.py then runs episodes on continuous_batch()
    batches: list[ScriptedBatch] = field(default_factory=list)  # every continuous batch made

    def _generation(self, prompt: Sequence[int], params: SamplingParams) -> Generation:
        text = self.respond(self.tokenizer.decode(list(prompt)))
        ids = [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.tokenizer.eos_token_id]
        stops = {self.tokenizer.eos_token_id, *params.stop_token_ids}
        ids = ids[: next(i + 1 for i, token in enumerate(ids) if token in stops)]
        reason = "length" if len(ids) > params.max_new_tokens else "stop"
        ids = ids[: params.max_new_tokens]
        logprobs = np.full(len(ids), SCRIPTED_LOGPROB, dtype=np.float32)
        return Generation(token_ids=ids, logprobs=logprobs, finish_reason=reason, policy_version=self.policy_version)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        self.calls.append(([list(p) for p in prompts], params))
        return [self._generation(prompt, params) for prompt in prompts]

    def load_weights(self, weights: WeightsSource, version: int) -> None:
        self.policy_version = version  # no weights to replace: the script is the policy

    def continuous_batch(self) -> ScriptedBatch:
        self.batches.append(ScriptedBatch(self))
        return self.batches[-1]


@dataclass
class ScriptedBatch:
    """A continuous batch (engines/continuous.py's interface) of a ScriptedEngine: a row's generation is handed back
    after as many steps as it has ids, as if it decoded one id a step. `events` logs ("submit", ticket) and
    ("done", ticket) in order; `submits` every (prompt, params)."""

    engine: ScriptedEngine
    events: list[tuple[str, int]] = field(default_factory=list)
    submits: list[tuple[list[int], SamplingParams]] = field(default_factory=list)
    _rows: dict[int, tuple[Generation, int]] = field(default_factory=dict)  # ticket -> (generation, steps left)

    def submit(self, prompt: Sequence[int], params: SamplingParams) -> int:
        ticket = len(self.submits)
        self.submits.append((list(prompt), params))
        generation = self.engine._generation(prompt, params)
        self._rows[ticket] = (generation, len(generation.token_ids))
        self.events.append(("submit", ticket))
        return ticket

    @property
    def busy(self) -> bool:
        return bool(self._rows)

    @property
    def running(self) -> int:
        return len(self._rows)

    def step(self) -> list[tuple[int, Generation]]:
        done = []
        for ticket, (generation, left) in list(self._rows.items()):
            if left <= 1:
                del self._rows[ticket]
                done.append((ticket, generation))
                self.events.append(("done", ticket))
            else:
                self._rows[ticket] = (generation, left - 1)
        return done
