"""`eos_token_ids`: the ids that end a generation, one definition for every engine.

A model may end a turn with more than the tokenizer's eos: instruct checkpoints list their turn-end ids
(e.g. "<|im_end|>" and "<|endoftext|>") in generation_config.json. An engine that stopped on fewer would
run past the end of a turn, so hf and vllm both stop on this whole set.
"""

from __future__ import annotations

from transformers import GenerationConfig, PreTrainedTokenizerBase

__all__ = ["eos_token_ids"]


def eos_token_ids(tokenizer: PreTrainedTokenizerBase, generation_config: GenerationConfig | None) -> set[int]:
    """The tokenizer's eos id and every eos id of the model's generation config (None: there is none)."""
    configured = None if generation_config is None else generation_config.eos_token_id
    ids = set(configured if isinstance(configured, list) else [configured])
    ids.add(tokenizer.eos_token_id)
    ids.discard(None)
    if not ids:
        raise ValueError("neither the tokenizer nor the model's generation config names an eos token")
    return ids
