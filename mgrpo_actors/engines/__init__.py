"""Rollout engines behind one interface: `hf` (transformers generate) and `vllm` (optional extra)."""

from mgrpo_actors.engines.base import (
    EngineConfig,
    EngineUnavailable,
    Generation,
    RolloutEngine,
    SamplingParams,
    WeightsSource,
)
from mgrpo_actors.engines.logprobs import sampling_log_probs, token_log_probs
from mgrpo_actors.engines.registry import ENGINE_NAMES, make_engine

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
