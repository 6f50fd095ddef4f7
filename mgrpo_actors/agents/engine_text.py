"""`engine_text_generator`: a rollout engine as the `generate(prompt) -> str` callable that ReasonTool takes.

The reasoning model answers a single user message; its tokens belong to no trajectory (a tool's output
is not trained on), so the text is simply decoded.
"""

from __future__ import annotations

from collections.abc import Callable

from mgrpo_actors.agents.trajectory import encode_opening
from mgrpo_actors.engines.base import SamplingParams
from mgrpo_actors.rollout.driver import AgentModel

__all__ = ["engine_text_generator"]


def engine_text_generator(model: AgentModel, params: SamplingParams) -> Callable[[str], str]:
    """generate(prompt): the model's reply to `prompt` as a user message, sampled with `params`."""
    tokenizer = model.tokenizer

    def generate(prompt: str) -> str:
        ids = encode_opening(tokenizer, [{"role": "user", "content": prompt}])  # M's text cannot write control ids
        (generation,) = model.engine.generate([ids], params)
        return tokenizer.decode(generation.token_ids, skip_special_tokens=True)

    return generate
