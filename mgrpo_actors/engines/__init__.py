"""Rollout engines behind one interface: `hf` (transformers generate) and `vllm` (optional extra).

Names are imported on first use (PEP 562), so a config that only needs `SamplingParams` from
`engines.base` does not pull in torch and transformers.
"""

from __future__ import annotations

from mgrpo_actors.lazy import lazy_exports

__all__ = [
    "ENGINE_NAMES",
    "EngineConfig",
    "EngineUnavailable",
    "Generation",
    "RolloutEngine",
    "SamplingParams",
    "WeightsSource",
    "make_engine",
    "sampling_log_probs",
    "token_log_probs",
]

_WHERE = {
    "EngineConfig": "base",
    "EngineUnavailable": "base",
    "Generation": "base",
    "RolloutEngine": "base",
    "SamplingParams": "base",
    "WeightsSource": "base",
    "sampling_log_probs": "logprobs",
    "token_log_probs": "logprobs",
    "ENGINE_NAMES": "registry",
    "make_engine": "registry",
}


__getattr__ = lazy_exports(__name__, _WHERE)
