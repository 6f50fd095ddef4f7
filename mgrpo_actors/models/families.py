"""Model families whose decoder layers take an external key/value cache object and explicit rotary positions
as they are: the rollout engine's own cache (engines/kv_cache.py) and the learner's shared prefix
(learner/shared_prefix.py) both call transformers' layers that way (tested on tiny Llama- and Qwen2-style
models and SmolLM2)."""

from __future__ import annotations

import torch

__all__ = ["EXTERNAL_CACHE_MODELS", "takes_external_cache"]

EXTERNAL_CACHE_MODELS = ("llama", "qwen2", "qwen3")


def takes_external_cache(model: torch.nn.Module) -> bool:
    """Whether `model` is of EXTERNAL_CACHE_MODELS without sliding-window layers (whose caches are their own)."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    sliding = (
        getattr(config, "use_sliding_window", False)
        or getattr(config, "layer_types", None)
        and any(kind != "full_attention" for kind in config.layer_types)
    )
    return getattr(config, "model_type", None) in EXTERNAL_CACHE_MODELS and not sliding
