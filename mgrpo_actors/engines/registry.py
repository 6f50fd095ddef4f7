"""`make_engine(name, ...)`: the rollout engine a config names."""

from __future__ import annotations

import os

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mgrpo_actors.engines.base import EngineConfig, RolloutEngine
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.engines.vllm import VLLMEngine
from mgrpo_actors.plugins import import_object

__all__ = ["ENGINE_NAMES", "make_engine"]

ENGINE_NAMES = ("hf", "hf-generate", "vllm")


def make_engine(
    name: str,
    model: PreTrainedModel | str | os.PathLike[str],
    tokenizer: PreTrainedTokenizerBase,
    cfg: EngineConfig | None = None,
) -> RolloutEngine:
    """Build engine `name`: "hf" (our decoding loop on a cache kept across calls) and "hf-generate"
    (transformers' generate) take a loaded model; "vllm" a local model directory (or a model loaded
    from one); "package.module:factory" calls factory(model, tokenizer, cfg) (a custom engine)."""
    if name in ("hf", "hf-generate"):
        if not isinstance(model, PreTrainedModel):
            raise TypeError(f"engine {name!r} needs a loaded transformers model, got {type(model).__name__}")
        return HFEngine(model, tokenizer, cfg, use_generate=name == "hf-generate")
    if name == "vllm":
        return VLLMEngine(model, tokenizer, cfg)
    if ":" in name:
        return import_object(name, what="engine")(model, tokenizer, cfg or EngineConfig())
    raise ValueError(
        f"unknown rollout engine {name!r}: known engines are {', '.join(ENGINE_NAMES)}, or 'package.module:factory'"
    )
