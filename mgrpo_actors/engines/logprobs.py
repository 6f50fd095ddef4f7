"""The sampling distribution of `SamplingParams`, shared by the engine that samples and whoever checks it.

Behaviour logprobs must be those of the distribution actually sampled from, or the PPO ratio starts
off 1. The hf engine samples through exactly the warpers built here (temperature, transformers' own class,
then top-k and top-p by transformers' rules without sorting the vocabulary, nucleus.py) and records
log-softmax of their output;
a learner or a test that recomputes logprobs from a forward pass uses `token_log_probs` with the same
params and gets the same numbers. `chunked_token_log_probs` is the same computation from the last hidden
states and the lm_head, a chunk of positions at a time, so a large vocabulary's logits [positions, vocab]
never exist whole (the learner: mgrpo_actors/learner/forward.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import LogitsProcessorList, TemperatureLogitsWarper

from mgrpo_actors.engines.base import SamplingParams
from mgrpo_actors.engines.nucleus import NucleusWarper

__all__ = ["chunked_token_log_probs", "sampling_log_probs", "sampling_warpers", "token_log_probs"]


def sampling_warpers(params: SamplingParams) -> LogitsProcessorList:
    """Temperature, top-k and top-p warpers for `params` (empty when greedy or when all are off)."""
    warpers = LogitsProcessorList()
    if params.greedy:
        return warpers
    if params.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k > 0 or params.top_p < 1.0:
        warpers.append(NucleusWarper(top_k=params.top_k, top_p=params.top_p))
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


def chunked_token_log_probs(
    hidden: torch.Tensor,
    lm_head: torch.nn.Module | torch.Tensor,
    targets: torch.Tensor,
    params: SamplingParams,
    chunk: int,
) -> torch.Tensor:
    """`token_log_probs(lm_head(hidden), targets, params)`, `chunk` positions at a time.

    hidden: (M, H), the model's last hidden states at the positions that need a logprob (nothing else);
    lm_head: the output layer (a module, called per chunk, so ZeRO-3's hooks gather its weight) or its
    weight (V, H); targets: (M,). Each chunk goes logits → sampling warpers → log-softmax → the target's
    entry, exactly as `token_log_probs`, so values and gradients are the full computation's. With
    gradients on and more than one chunk, each chunk runs under activation checkpointing: its logits
    and their warped and log-softmax copies are freed after the forward and recomputed one chunk at a
    time in backward, so at most one chunk's [chunk, V] tensors are alive (the price: a second lm_head
    matmul and warp per chunk in backward). A single chunk (M <= chunk, or chunk <= 0 for no chunking)
    is computed directly, without recomputation.
    """
    if isinstance(lm_head, torch.Tensor):
        weight = lm_head

        def head(h: torch.Tensor) -> torch.Tensor:
            return F.linear(h, weight)

    else:
        head = lm_head

    def part(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return token_log_probs(head(h), t, params)

    positions = hidden.shape[0]
    if chunk <= 0 or positions <= chunk:
        return part(hidden, targets)
    recompute = torch.is_grad_enabled()
    pieces = []
    for start in range(0, positions, chunk):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        pieces.append(
            checkpoint(part, h, t, use_reentrant=False, preserve_rng_state=False) if recompute else part(h, t)
        )
    return torch.cat(pieces)
