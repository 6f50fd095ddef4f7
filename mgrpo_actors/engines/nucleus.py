"""Top-k then top-p without sorting the vocabulary: `NucleusWarper`, the sampling filter of logprobs.py.

transformers' warpers sort every row of scores [rows, vocab] for top-p (TopPLogitsWarper: `torch.sort` over
the whole vocabulary). The nucleus is a handful of ids: here each row needs one top-k of a few hundred
candidates, one softmax (top-p alone) and one comparison over the vocabulary. Measured on SmolLM2's logits over real
text (49,152 ids, temperature 0.7, 2 CPU cores): top-p 0.95 at a decode step of batch 32, 63 -> 13 ms; over a
learner's 1,000 positions, 2.34 -> 0.46 s; top-k 50 then top-p 0.95, 16 -> 4 ms and 1.13 -> 0.31 s.

The rules are transformers' (TopKLogitsWarper, then TopPLogitsWarper with min_tokens_to_keep = 1):
- top-k keeps every token whose score is at least the k-th largest (ties with the k-th are kept);
- top-p keeps a token iff the probability of the tokens scored strictly above it, under the distribution
  left by top-k, is below p (transformers drops, in ascending order, the tokens whose cumulative probability
  stays at or below 1 - p, which is the same rule); the most probable token is always kept.
Tokens of equal score are kept or dropped together: transformers' own choice among ties at the nucleus's
edge follows its unstable sort, so it can depend on the row's length and the batch; this one depends on
the scores alone, which is what the engine that samples and the learner that scores must share. Away from
ties the two agree, up to float rounding of a probability that lands exactly on p.

How: the candidates are the row's m largest scores (torch.topk, sorted); their probabilities come from the
row's softmax (with top-k, from the k candidates and the tokens tied with the k-th), the mass above each from
a cumulative sum over the candidates, and the row keeps every score at or above the lowest candidate kept.
With top-k the k candidates decide every row. With top-p alone that is exact once the candidates hold
probability >= p (every token below them then has at least that much above it): m starts at
FIRST_CANDIDATES; a row whose nucleus is wider (a flat distribution) takes all its scores, sorted.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from transformers import LogitsProcessor

__all__ = ["NucleusWarper", "Threshold", "kept_threshold", "nucleus_scores"]


class Threshold(NamedTuple):
    """What the filters keep of each row: every score >= `lowest` [rows, 1]. `values` and `ids` [rows, m] are
    the row's m largest scores (descending) and their ids: with top-k, the k candidates; with top-p alone, the
    first FIRST_CANDIDATES. A row may keep more than its candidates (ties with the k-th outside them, a flat
    row's wide nucleus); the engine's sampler checks (sampler.py)."""

    lowest: torch.Tensor
    values: torch.Tensor
    ids: torch.Tensor


FIRST_CANDIDATES = 256  # top-p alone: candidates per row (SmolLM2 on text at temperature 0.7: p 0.95 needs more in 7 %)


def _lowest_kept(values: torch.Tensor, probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(lowest score top-p keeps [rows, 1], whether these candidates decide it [rows]), from a row's largest
    scores `values` [rows, m] (descending) and their probabilities."""
    # In float64: a running sum is the one step whose rounding a device may vary with the batch's shape (CUDA's scan
    # kernels do), and over thousands of candidates float32's would move the edge of p by ~1e-7.
    probs = probs.double()
    inclusive = probs.cumsum(dim=-1)
    above = inclusive - probs  # mass strictly before each candidate in the sorted order
    # Ties share the mass strictly above their score: `above` taken at each tie group's first member and carried
    # over the group by a running maximum (above is non-decreasing).
    new_group = torch.ones_like(values, dtype=torch.bool)
    new_group[:, 1:] = values[:, 1:] != values[:, :-1]
    above = torch.where(new_group, above, torch.zeros_like(above)).cummax(dim=-1).values
    keep = above < top_p
    keep[:, 0] = True  # the most probable token stays
    lowest = torch.where(keep, values, torch.full_like(values, float("inf"))).min(dim=-1, keepdim=True).values
    # Decided when every token below the candidates has mass >= p above it, or the last candidate is dropped.
    decided = (inclusive[:, -1] >= top_p) | ~keep[:, -1]
    return lowest, decided


def _top_k_then_p(scores: torch.Tensor, top_k: int, top_p: float) -> Threshold:
    """The k candidates decide the lowest score kept, since every other token is below the k-th (dropped by
    top-k) or tied with it (kept or dropped with it). The mass is top-k's: the candidates' plus that of the
    tokens tied with the k-th that topk left out."""
    values, ids = torch.topk(scores, top_k, dim=-1)
    kth = values[:, -1:]
    if top_p >= 1.0:
        return Threshold(kth, values, ids)
    left_out = (scores == kth).sum(-1, keepdim=True) - (values == kth).sum(-1, keepdim=True)
    # A sum over k values per row: one thread each, whatever the batch (a row of 32,768 or more would be split)
    log_total = torch.logsumexp(values, dim=-1, keepdim=True)
    with_ties = torch.logaddexp(log_total, kth + left_out.clamp_min(1).to(scores.dtype).log())
    probs = torch.exp(values - torch.where(left_out > 0, with_ties, log_total))
    return Threshold(_lowest_kept(values, probs, top_p)[0], values, ids)


def _top_p(scores: torch.Tensor, top_p: float) -> Threshold:
    """FIRST_CANDIDATES candidates a row decide the lowest score kept; a row they leave undecided is decided from
    all its scores."""
    vocab = scores.shape[-1]
    # softmax's row-wise kernel: a row's probabilities are the same bits whatever the batch, the memory layout or
    # the threads (a log-sum-exp over a whole row is a reduction torch may split across threads).
    probs = torch.softmax(scores, dim=-1)
    m = min(vocab, FIRST_CANDIDATES)
    values, ids = torch.topk(scores, m, dim=-1)
    lowest, decided = _lowest_kept(values, probs.gather(-1, ids), top_p)
    pending = torch.nonzero(~decided).squeeze(-1)
    if pending.numel() and m < vocab:  # a flat row (its nucleus wider than the candidates): all its scores, sorted
        every, order = torch.sort(scores[pending], dim=-1, descending=True)
        lowest[pending] = _lowest_kept(every, probs[pending].gather(-1, order), top_p)[0]
    return Threshold(lowest, values, ids)


def kept_threshold(scores: torch.Tensor, top_k: int, top_p: float) -> Threshold | None:
    """The lowest score each row keeps under top-k then top-p (the module's rules), with the candidates it was
    decided from; None when neither filter removes anything."""
    top_k_on = 0 < top_k < scores.shape[-1]
    if scores.shape[0] == 0 or scores.shape[-1] == 0 or (top_p >= 1.0 and not top_k_on):
        return None
    with torch.no_grad():  # which tokens stay is no function to differentiate
        plain = scores.detach()
        return _top_k_then_p(plain, top_k, top_p) if top_k_on else _top_p(plain, top_p)


def nucleus_scores(scores: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """`scores` [rows, vocab] with -inf outside top-k, then outside top-p (the module's rules)."""
    threshold = kept_threshold(scores, top_k, top_p)
    if threshold is None:
        return scores
    # only the kept scores carry gradients: which tokens stay is decided without them
    return scores.masked_fill(scores < threshold.lowest, float("-inf"))


class NucleusWarper(LogitsProcessor):
    """Top-k then top-p as one logits processor (`nucleus_scores`); either may be off (0, 1.0)."""

    def __init__(self, top_k: int = 0, top_p: float = 1.0) -> None:
        if top_k < 0 or not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_k must be >= 0 and top_p in (0, 1], got {top_k} and {top_p}")
        self.top_k, self.top_p = top_k, top_p

    def __call__(self, input_ids: torch.LongTensor | None, scores: torch.Tensor) -> torch.Tensor:
        return nucleus_scores(scores, self.top_k, self.top_p)
