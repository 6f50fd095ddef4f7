"""The rollout engine's decoding loop: one forward over each row's new prompt tokens, then one token per
row per step, on a RowCache (kv_cache.py) that the next call starts from.

Sampling is exactly the distribution the learner scores (sampler.py: temperature, top-k, top-p by
transformers' rules, nucleus.py; the behaviour logprob of a token is log-softmax of the warped scores at
that token, and the token is drawn by inverse transform from those same probabilities). Each row draws
from a stream of its own, seeded by the call's seed and the row's index: what row i samples depends on its own
prompt and seed, not on which other rows share the batch (up to the rounding of batched matrix
products). Only the last position's logits are computed (`logits_to_keep=1`): no vocabulary-wide work
on prompt tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mgrpo_actors.engines.base import FinishReason, SamplingParams
from mgrpo_actors.engines.kv_cache import RowCache
from mgrpo_actors.engines.sampler import sample

__all__ = ["Decoded", "block_of", "decode", "feeder", "forward_block", "row_generators"]


@dataclass(frozen=True)
class Decoded:
    """One row's sampled ids (the stop id included) with their behaviour logprobs."""

    token_ids: list[int]
    logprobs: np.ndarray  # float32
    finish_reason: FinishReason


def row_generators(rows: int, seed: int | None, engine_rng: torch.Generator) -> list[torch.Generator]:
    """One sampling stream per row: from (seed, row) when the call is seeded, else drawn from the engine's
    own stream (which then moves on)."""
    generators = []
    for row in range(rows):
        if seed is None:
            row_seed = int(torch.randint(0, 2**62, (1,), generator=engine_rng).item())
        else:
            row_seed = int(np.random.SeedSequence([seed, row]).generate_state(2, dtype=np.uint64)[0] >> 2)
        generators.append(torch.Generator().manual_seed(row_seed))
    return generators


def block_of(suffixes: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, valid) [rows, width]: each row's new ids right-aligned, so every row's last id is in the last
    column (a row with none is all holes)."""
    width = max(len(s) for s in suffixes)
    block = torch.full((len(suffixes), width), pad_id, dtype=torch.long)
    valid = torch.zeros(len(suffixes), width, dtype=torch.bool)
    for row, ids in enumerate(suffixes):
        if ids:
            block[row, width - len(ids) :] = torch.as_tensor(list(ids), dtype=torch.long)
            valid[row, width - len(ids) :] = True
    return block.to(device), valid.to(device)


def forward_block(model: torch.nn.Module, cache: RowCache, block: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Last-position logits [rows, vocab] of a block of new columns; the cache then holds them."""
    out = model(
        input_ids=block,
        attention_mask=cache.mask(valid),
        position_ids=cache.positions(valid),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    cache.advance(block, valid)
    return out.logits[:, -1]


def feeder(model: torch.nn.Module, pad_id: int):  # -> prefill.Feed
    """Feed suffixes into a cache without sampling (prefill.py's shared prefixes)."""

    def feed(cache: RowCache, suffixes: Sequence[Sequence[int]]) -> None:
        forward_block(model, cache, *block_of(suffixes, pad_id, cache.valid.device))

    return feed


def decode(
    model: torch.nn.Module,
    cache: RowCache,
    suffixes: Sequence[Sequence[int]],
    params: SamplingParams,
    stop_ids: set[int],
    generators: Sequence[torch.Generator],
    pad_id: int,
) -> list[Decoded]:
    """Feed each row's new prompt tokens `suffixes[i]` (at least one each), then sample up to
    `params.max_new_tokens` tokens per row until each has sampled a stop id."""
    rows, device = len(suffixes), cache.valid.device
    block, block_valid = block_of(suffixes, pad_id, device)
    cache.reserve(block.shape[1] + params.max_new_tokens)
    stop = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    active = torch.ones(rows, dtype=torch.bool, device=device)
    sampled: list[torch.Tensor] = []
    logprobs: list[torch.Tensor] = []
    logits = forward_block(model, cache, block, block_valid)
    for step in range(params.max_new_tokens):
        ids, lps = sample(logits, params, generators)
        sampled.append(torch.where(active, ids, -1))
        logprobs.append(lps)
        active = active & ~torch.isin(ids, stop)
        if step == params.max_new_tokens - 1 or not bool(active.any()):
            break
        logits = forward_block(model, cache, torch.where(active, ids, pad_id)[:, None], active[:, None])
    return _rows(torch.stack(sampled, dim=1).cpu(), torch.stack(logprobs, dim=1).float().cpu(), stop_ids)


def _rows(sampled: torch.Tensor, logprobs: torch.Tensor, stop_ids: set[int]) -> list[Decoded]:
    out = []
    for ids, lps in zip(sampled.tolist(), logprobs.numpy(), strict=True):
        n = next((i for i, token in enumerate(ids) if token < 0), len(ids))
        reason: FinishReason = "stop" if n and ids[n - 1] in stop_ids else "length"
        row_lp = np.ascontiguousarray(lps[:n], dtype=np.float32)
        if not np.isfinite(row_lp).all():
            raise RuntimeError("a sampled token has logprob -inf: sampling and logprobs used different distributions")
        out.append(Decoded(ids[:n], row_lp, reason))
    return out
