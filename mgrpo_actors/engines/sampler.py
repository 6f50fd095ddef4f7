"""The rollout engine's sampler: one token per row from last-position logits, with its behaviour logprob.

The distribution is exactly the one the learner scores (logprobs.py `sampling_log_probs`): the logits in
float32, divided by the temperature as transformers' TemperatureLogitsWarper does, top-k then top-p by
nucleus.py's rules, log-softmax. A token is drawn by inverse transform: the first id, in id order, whose
cumulative probability exceeds the row's draw (one uniform from the row's own stream, decode.py), so what
a row samples depends on its own logits and draw alone.

Two paths, the same distribution:
- **candidates** (top-k or top-p on, and no row keeping more than MAX_CANDIDATES ids, the usual case): the
  log-softmax and the draw over the kept ids only, found among the candidates nucleus.py decided from (a
  row that keeps more, as bf16 logits often do by ties with the k-th score, counts its kept ids and takes
  them by one more top-k). Nothing over the vocabulary but what deciding the filters takes (a top-k; with
  top-p alone a softmax as well). At batch
  32 over SmolLM2's 49,152 ids with top-k 50 and top-p 0.95 this was 19 ms a step through the masked
  vocabulary (docs/benchmarks.md `rollout`).
- **vocabulary** (no filter, or a row keeping more than MAX_CANDIDATES ids): log-softmax over the whole
  (masked) row and a two-level inverse transform: the block of 512 ids the draw falls in, from float32
  block sums accumulated in float64 across blocks, then the id within the block in float64. A float32
  running sum over a whole vocabulary would drift by up to ~1e-3; a block's float32 sum is off by
  ~1e-7 of its mass, and a draw that rounding carries past a block's last id of positive mass takes that
  id, so an id of zero mass (outside top-k/top-p) is never drawn.

Behaviour logprobs are each path's own log-softmax of the kept scores; the learner's recomputation over the
masked vocabulary agrees to float32 rounding (tests/unit/engines/test_sampler.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mgrpo_actors.engines.base import SamplingParams
from mgrpo_actors.engines.nucleus import Threshold, kept_threshold

__all__ = ["BLOCK", "inverse_transform", "sample"]

BLOCK = 512  # ids per block of the vocabulary path's two-level inverse transform
MAX_CANDIDATES = 1024  # more kept ids than this in a row (a flat row's top-p nucleus): the vocabulary path


def sample(
    logits: torch.Tensor, params: SamplingParams, generators: Sequence[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [rows], behaviour logprobs [rows] float32) from last-position logits [rows, vocab]; row i draws
    one uniform from generators[i] (none when greedy)."""
    scores = logits.float()
    if params.greedy:
        ids = scores.argmax(dim=-1)
        return ids, torch.log_softmax(scores, dim=-1).gather(-1, ids[:, None]).squeeze(-1)
    if params.temperature != 1.0:
        scores = scores / params.temperature  # TemperatureLogitsWarper's operation, bit for bit
    draws = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators]).to(scores.device)
    threshold = kept_threshold(scores, params.top_k, params.top_p)
    if threshold is not None:
        candidates = _every_kept_candidate(scores, threshold)
        if candidates is not None:
            return _sample_candidates(*candidates, threshold.lowest, draws)
        scores = scores.masked_fill(scores < threshold.lowest, float("-inf"))
    logprobs = torch.log_softmax(scores, dim=-1)
    ids = inverse_transform(logprobs.exp(), draws)
    return ids, logprobs.gather(-1, ids[:, None]).squeeze(-1)


def _every_kept_candidate(scores: torch.Tensor, threshold: Threshold) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(values, ids) [rows, m]: candidates holding every id each row keeps (values of other entries are below
    the row's lowest kept score); None if some row keeps more than MAX_CANDIDATES.

    A row's candidates are its largest scores, so it keeps an id outside them only if it keeps its last
    candidate. Those rows (in bf16 often: the k-th score is shared by other ids) are counted in one pass over
    their scores, and given all the ids they keep by one more top-k; the other rows' candidates are padded."""
    values, ids = threshold.values, threshold.ids
    open_rows = torch.nonzero((values[:, -1:] >= threshold.lowest).squeeze(-1)).squeeze(-1)
    if open_rows.numel() == 0:
        return values, ids
    kept = (scores[open_rows] >= threshold.lowest[open_rows]).sum(-1)
    m = int(kept.max())
    if m <= values.shape[1]:
        return values, ids
    if m > MAX_CANDIDATES:
        return None
    pad = m - values.shape[1]
    values = torch.nn.functional.pad(values, (0, pad), value=float("-inf"))
    ids = torch.nn.functional.pad(ids, (0, pad), value=0)  # an id of -inf score: never drawn
    values[open_rows], ids[open_rows] = torch.topk(scores[open_rows], m, dim=-1)
    return values, ids


def _sample_candidates(
    values: torch.Tensor, ids: torch.Tensor, lowest: torch.Tensor, draws: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw among the kept candidates, in id order (the vocabulary path's order), in float64."""
    # log_softmax, as the learner computes it over the masked vocabulary: the same max, the same rounding of it
    logprobs = torch.log_softmax(values.masked_fill(values < lowest, float("-inf")), dim=-1)
    order = ids.argsort(dim=-1)
    ids, logprobs = ids.gather(-1, order), logprobs.gather(-1, order)
    probs = logprobs.double().exp()
    cdf = probs.cumsum(dim=-1)
    position = torch.searchsorted(cdf, (draws * cdf[:, -1])[:, None], right=True).squeeze(-1)
    position = torch.minimum(position, _last_positive(probs))
    return ids.gather(-1, position[:, None]).squeeze(-1), logprobs.gather(-1, position[:, None]).squeeze(-1)


def _last_positive(probs: torch.Tensor) -> torch.Tensor:
    """Per row, the last index of positive probability (rounding can carry a draw past it)."""
    return probs.shape[-1] - 1 - (probs > 0).flip(-1).int().argmax(-1)


def inverse_transform(probs: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """The id whose cumulative probability first exceeds draws[r] * total, per row of probs [rows, vocab]
    (float32): the block of BLOCK ids the draw falls in, then the id within it. An id of zero mass is never
    drawn."""
    rows, vocab = probs.shape
    blocks = -(-vocab // BLOCK)
    padded = probs if vocab == blocks * BLOCK else torch.nn.functional.pad(probs, (0, blocks * BLOCK - vocab))
    padded = padded.view(rows, blocks, BLOCK)
    block_sums = padded.sum(-1)
    block_cdf = block_sums.double().cumsum(-1)
    target = draws * block_cdf[:, -1]
    block = torch.searchsorted(block_cdf, target[:, None], right=True).squeeze(-1)
    block = torch.minimum(block, _last_positive(block_sums))  # a draw rounded up to the total
    before = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp(min=0)[:, None]).squeeze(-1), 0.0)
    inside = padded[torch.arange(rows, device=probs.device), block]  # [rows, BLOCK]
    within = torch.searchsorted(inside.double().cumsum(-1), (target - before)[:, None], right=True).squeeze(-1)
    return block * BLOCK + torch.minimum(within, _last_positive(inside))
