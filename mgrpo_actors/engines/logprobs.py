"""The sampling distribution of `SamplingParams`, shared by the engine that samples and whoever checks it.

Behaviour logprobs must be those of the distribution actually sampled from, or the PPO ratio starts
off 1. The hf engine samples through exactly the warpers built here (temperature, then top-k, then
top-p, transformers' own classes, in transformers' own order) and records log-softmax of their output;
a learner or a test that recomputes logprobs from a forward pass uses `token_log_probs` with the same
params and gets the same numbers.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from mgrpo_actors.engines.base import SamplingParams

__all__ = ["sampling_log_probs", "sampling_warpers", "token_log_probs"]


def sampling_warpers(params: SamplingParams) -> LogitsProcessorList:
    """Temperature, top-k and top-p warpers for `params` (empty when greedy or when all are off)."""
    warpers = LogitsProcessorList()
    if params.greedy:
        return warpers
    if params.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k > 0:
        warpers.append(TopKLogitsWarper(top_k=params.top_k))
    if params.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=params.top_p))
    return warpers


def sampling_log_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Log-probabilities [..., vocab] of the sampling distribution (-inf outside top-k/top-p), in float32."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    # The warpers are row-wise and ignore input_ids, so every position can go through in one call.
    warped = sampling_warpers(params)(None, flat)
    return torch.log_softmax(warped, dim=-1).reshape(logits.shape)


def token_log_probs(logits: torch.Tensor, token_ids: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Log-probability of each `token_ids[...]` under `sampling_log_probs(logits[...])`."""
    log_probs = sampling_log_probs(logits, params)
    return log_probs.gather(-1, token_ids.unsqueeze(-1).long()).squeeze(-1)
