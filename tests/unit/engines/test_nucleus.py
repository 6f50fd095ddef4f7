"""Top-k then top-p without sorting the vocabulary (engines/nucleus.py): transformers' TopK/TopP rules wherever a
token's fate is not decided by float rounding at p, ties kept or dropped together, a row's result independent of
the rows beside it, and the flat-row and tied-k-th paths."""

from __future__ import annotations

import pytest
import torch
from transformers import TopKLogitsWarper, TopPLogitsWarper

from mgrpo_actors.engines.nucleus import FIRST_CANDIDATES, NucleusWarper, nucleus_scores

CASES = ((0, 0.9), (50, 1.0), (50, 0.95), (5, 0.5), (0, 0.3), (1, 0.9), (0, 0.999), (3000, 0.8))


def _transformers(scores: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    out = scores.clone()
    if top_k:
        out = TopKLogitsWarper(top_k)(None, out)
    if top_p < 1.0:
        out = TopPLogitsWarper(top_p)(None, out)
    return out


def _mass_above(row: torch.Tensor, top_k: int, token: int) -> float:
    """float64: the probability, under top-k's distribution, of the tokens scored strictly above `token`."""
    row = row.double()
    if 0 < top_k < row.numel():
        row = torch.where(row >= torch.topk(row, top_k).values[-1], row, torch.tensor(float("-inf"), dtype=row.dtype))
    return float(torch.softmax(row, -1)[row > row[token]].sum())


def test_transformers_rules_up_to_rounding_at_p():
    g = torch.Generator().manual_seed(0)
    checked = differing = 0
    for _ in range(120):
        vocab = int(torch.randint(10, 3000, (1,), generator=g))
        rows = int(torch.randint(1, 9, (1,), generator=g))
        scores = torch.randn(rows, vocab, generator=g) * float(torch.rand((), generator=g) * 8)
        for top_k, top_p in CASES:
            ours = nucleus_scores(scores, top_k, top_p)
            reference = _transformers(scores, top_k, top_p)
            kept = torch.isfinite(ours)
            assert torch.equal(ours[kept], scores[kept])  # what is kept is untouched
            checked += 1
            for row, token in (kept != torch.isfinite(reference)).nonzero().tolist():
                differing += 1  # only where float32 rounding decides: the mass above it is p to ~1e-6
                assert _mass_above(scores[row], top_k, token) == pytest.approx(top_p, abs=5e-6)
    assert checked == 120 * len(CASES) and differing < checked / 50


def test_ties_are_kept_or_dropped_together_and_rows_do_not_depend_on_their_neighbours():
    # Scores 3, 2, 2, 2, 1, ... : with p just above the top token's mass, the three tied 2s go together.
    row = torch.tensor([3.0, 2.0, 2.0, 2.0, 1.0, 0.0, -1.0, 0.5])
    top = float(torch.softmax(row, -1)[0])
    kept = torch.isfinite(nucleus_scores(row[None], 0, top + 1e-3))[0]
    assert kept.tolist() == [True, True, True, True, False, False, False, False]
    assert torch.isfinite(nucleus_scores(row[None], 0, top - 1e-3))[0].tolist() == [True] + [False] * 7
    # A row's nucleus is the same alone, first or last in a batch, and beside rows that need a wider search.
    g = torch.Generator().manual_seed(1)
    batch = torch.randn(6, 500, generator=g) * 4
    batch[2] = torch.randn(500, generator=g) * 0.01  # flat: its nucleus is wider than the first candidates
    for top_k, top_p in CASES:
        together = nucleus_scores(batch, top_k, top_p)
        for i in range(batch.shape[0]):
            assert torch.equal(nucleus_scores(batch[i : i + 1], top_k, top_p), together[i : i + 1])
        reversed_rows = nucleus_scores(batch.flip(0), top_k, top_p)
        assert torch.equal(reversed_rows.flip(0), together)


def test_a_flat_row_takes_every_score_and_a_tied_kth_keeps_its_ties():
    flat = torch.linspace(0.0, 0.01, 4 * FIRST_CANDIDATES)[None]  # about uniform: the nucleus is ~90 % of ids
    ours = nucleus_scores(flat, 0, 0.9)
    assert int(torch.isfinite(ours).sum()) > FIRST_CANDIDATES
    assert torch.equal(torch.isfinite(ours), torch.isfinite(_transformers(flat, 0, 0.9)))
    # top-k 2 with the 2nd score tied three ways: all three stay (transformers' top-k rule), and the mass that
    # top-p sees includes them: p 0.5 keeps the top token alone only if it holds half the mass of the four.
    tied = torch.tensor([[2.0, 1.0, 1.0, 1.0, -3.0, -4.0]])
    assert torch.isfinite(nucleus_scores(tied, 2, 1.0))[0].tolist() == [True, True, True, True, False, False]
    top_share = float(torch.softmax(tied[0, :4], -1)[0])  # 0.475: below 0.5, so the tied group is needed
    assert top_share < 0.5
    assert torch.isfinite(nucleus_scores(tied, 2, 0.5))[0].tolist() == [True, True, True, True, False, False]
    assert torch.isfinite(nucleus_scores(tied, 2, 0.4))[0].tolist() == [True, False, False, False, False, False]


def test_the_warper_refuses_what_it_cannot_mean():
    with pytest.raises(ValueError, match="top_p"):
        NucleusWarper(top_k=0, top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        NucleusWarper(top_k=-1, top_p=0.9)
    scores = torch.randn(2, 30)
    assert torch.equal(NucleusWarper()(None, scores), scores)  # both off: unchanged


def _edges(scores: torch.Tensor) -> list[float]:
    """p values on the edge of rounding for row 0: the mass above each of its top tokens, as a softmax and as
    exp(score - log-sum-exp) compute it (in this layout)."""
    values = torch.sort(scores[:1], -1, descending=True).values
    edges = []
    for probs in (torch.softmax(values, -1), torch.exp(values - torch.logsumexp(scores[:1], -1, keepdim=True))):
        edges += (probs.cumsum(-1) - probs)[0, 1:30].tolist()
    return edges


def test_a_rows_nucleus_ignores_memory_layout_and_threads_even_at_the_edge_of_p():
    # Where float rounding decides, the same row must still decide the same way laid out column-major, or alone
    # on 1 or 2 threads (a whole-row reduction, which torch may split by layout or threads, would not).
    g = torch.Generator().manual_seed(5)
    threads = torch.get_num_threads()
    try:
        for _ in range(25):
            rows = torch.randn(8, 300, generator=g) * 2
            for scores, other in ((rows, rows.t().contiguous().t()), (rows[:1], rows[:1].clone())):
                for edge in _edges(scores) + _edges(other):
                    torch.set_num_threads(1)
                    one = torch.isfinite(nucleus_scores(scores, 0, edge))
                    torch.set_num_threads(2)
                    assert torch.equal(one, torch.isfinite(nucleus_scores(other, 0, edge)))
        big = torch.randn(1, 49152, generator=g) * 3
        for edge in _edges(big):
            torch.set_num_threads(1)
            one = torch.isfinite(nucleus_scores(big, 0, edge))
            torch.set_num_threads(2)
            assert torch.equal(one, torch.isfinite(nucleus_scores(big, 0, edge)))
    finally:
        torch.set_num_threads(threads)
