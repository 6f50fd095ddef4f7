"""The engine's sampler (engines/sampler.py): both paths draw from the distribution the learner scores, the
candidates path gives the vocabulary path's ids for the same draws, ids of zero mass are never drawn, and the
draw frequencies match the probabilities."""

from __future__ import annotations

import pytest
import torch

from mgrpo_actors.engines.base import SamplingParams
from mgrpo_actors.engines.logprobs import sampling_log_probs
from mgrpo_actors.engines.sampler import inverse_transform, sample


def _refuse(*args):
    raise AssertionError("the vocabulary path ran")


FILTERS = [(50, 1.0), (50, 0.95), (5, 0.5), (0, 0.9), (0, 0.3), (1, 1.0), (0, 1.0)]


def _generators(rows: int, seed: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed * 1000 + row) for row in range(rows)]


def _vocabulary_path(logits: torch.Tensor, params: SamplingParams, generators) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: log-softmax over the masked vocabulary (the learner's computation), then the id whose
    float64 cumulative probability first exceeds the row's draw times the total."""
    logprobs = sampling_log_probs(logits, params).double()
    draws = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators])
    cdf = logprobs.exp().cumsum(-1)
    ids = torch.searchsorted(cdf, (draws * cdf[:, -1])[:, None], right=True).squeeze(-1)
    return ids, logprobs.gather(-1, ids[:, None]).squeeze(-1).float()


@pytest.mark.parametrize(("top_k", "top_p"), FILTERS)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_ids_and_logprobs_are_the_learners_distribution(top_k, top_p, temperature):
    g = torch.Generator().manual_seed(top_k * 7 + int(top_p * 100))
    logits = (torch.randn(24, 3000, generator=g) * 4).bfloat16()
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=1)
    ids, logprobs = sample(logits, params, _generators(24, 1))
    expected_ids, expected_logprobs = _vocabulary_path(logits, params, _generators(24, 1))
    assert logprobs.dtype == torch.float32
    assert torch.equal(ids, expected_ids)
    torch.testing.assert_close(logprobs, expected_logprobs, atol=1e-6, rtol=0)
    learner = sampling_log_probs(logits, params).gather(-1, ids[:, None]).squeeze(-1)
    torch.testing.assert_close(logprobs, learner, atol=1e-6, rtol=0)


@pytest.mark.parametrize(("top_k", "top_p"), [(50, 0.95), (50, 1.0), (0, 0.95), (0, 1.0)])
@pytest.mark.parametrize(("dtype", "temperature"), [(torch.bfloat16, 0.3), (torch.bfloat16, 1.0), (torch.float32, 0.7)])
def test_logprobs_agree_with_the_learner_at_a_real_models_scale(top_k, top_p, dtype, temperature):
    """Logits around 40 over 49,152 ids (as SmolLM2's): the behaviour logprob is the learner's to float32 rounding,
    whichever path; in bf16 the k-th score is shared by other ids in most rows."""
    g = torch.Generator().manual_seed(11)
    logits = (torch.randn(32, 49_152, generator=g) * 3 + 40).to(dtype)
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=1)
    ids, logprobs = sample(logits, params, _generators(32, 4))
    expected_ids, expected_logprobs = _vocabulary_path(logits, params, _generators(32, 4))
    assert torch.equal(ids, expected_ids)
    torch.testing.assert_close(logprobs, expected_logprobs, atol=5e-7, rtol=0)


def test_greedy_takes_the_largest_score_with_its_plain_logprob():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, -1.0, 0.5]])
    ids, logprobs = sample(logits, SamplingParams(temperature=0.0, max_new_tokens=1), [])
    assert ids.tolist() == [1, 0]
    torch.testing.assert_close(logprobs, torch.log_softmax(logits, -1).gather(-1, ids[:, None]).squeeze(-1))


def test_ties_outside_the_candidates_are_kept_and_drawn(monkeypatch):
    """Top-k 2 over a row whose 2nd score is shared by 5 ids: all 5 are kept (transformers' rule), though only 2
    are candidates; each is drawn, and nothing below them, still without the vocabulary path."""
    import mgrpo_actors.engines.sampler as sampler

    monkeypatch.setattr(sampler, "inverse_transform", _refuse)
    logits = torch.full((1, 40), -5.0)
    logits[0, 3] = 2.0
    logits[0, [7, 11, 19, 23, 31]] = 1.0
    params = SamplingParams(temperature=1.0, top_k=2, max_new_tokens=1)
    drawn = set()
    for seed in range(300):
        ids, logprobs = sample(logits, params, _generators(1, seed))
        drawn.add(int(ids))
        assert torch.isfinite(logprobs).all()
    assert drawn == {3, 7, 11, 19, 23, 31}


def test_draw_frequencies_match_the_probabilities():
    """20,000 draws over 6 kept ids: each frequency within 4.5 standard errors of its probability (a fixed seed:
    the same draws every run)."""
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -9.0, -9.5]]).repeat(20_000, 1)
    params = SamplingParams(temperature=0.9, top_k=6, max_new_tokens=1)
    ids, _ = sample(logits, params, _generators(20_000, 3))
    probs = torch.softmax(logits[0, :6] / 0.9, -1).double()
    counts = torch.bincount(ids, minlength=8).double()
    assert counts[6:].sum() == 0
    frequency = counts[:6] / 20_000
    standard_error = (probs * (1 - probs) / 20_000).sqrt()
    assert bool(((frequency - probs).abs() < 4.5 * standard_error).all()), (frequency, probs)


def test_the_inverse_transform_draws_what_a_full_float64_cdf_draws():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(16, 3000, generator=g) * 4, dim=-1)
    probs[:, ::7] = 0.0  # ids outside top-k / top-p
    draws = torch.rand(16, generator=g, dtype=torch.float64)
    cdf = probs.double().cumsum(-1)
    expected = torch.searchsorted(cdf, (draws * cdf[:, -1])[:, None], right=True).squeeze(-1)
    drawn = inverse_transform(probs, draws)
    assert torch.equal(drawn, expected)
    assert bool((probs.gather(-1, drawn[:, None]) > 0).all())


def test_a_draw_at_the_top_takes_the_last_id_of_positive_mass():
    edge = inverse_transform(torch.tensor([[0.0, 0.5, 0.5, 0.0]]), torch.tensor([1.0], dtype=torch.float64))
    assert edge.item() == 2
    # the last blocks hold no mass: the draw stays in the last block that does
    probs = torch.zeros(1, 2048)
    probs[0, 700] = 1.0
    assert inverse_transform(probs, torch.tensor([1.0], dtype=torch.float64)).item() == 700


def test_top_k_draws_among_its_candidates_without_the_vocabulary_path(monkeypatch):
    """The fast path is taken: with top-k nothing goes through the vocabulary path."""
    import mgrpo_actors.engines.sampler as sampler

    monkeypatch.setattr(sampler, "inverse_transform", _refuse)
    logits = torch.randn(8, 5000, generator=torch.Generator().manual_seed(5))
    ids, _ = sample(logits, SamplingParams(top_k=50, top_p=0.95, max_new_tokens=1), _generators(8, 2))
    assert bool((logits.gather(-1, ids[:, None]) >= torch.topk(logits, 50).values[:, -1:]).all())


def _learner_kept(logits: torch.Tensor, params: SamplingParams) -> list[set[int]]:
    kept = sampling_log_probs(logits, params) > float("-inf")
    return [set(torch.nonzero(row).squeeze(-1).tolist()) for row in kept]


@pytest.mark.parametrize(
    ("case", "params"),
    [
        ("tie group across the 256th candidate", SamplingParams(top_p=0.9999, max_new_tokens=1)),
        ("tie group across the 256th candidate, dropped by p", SamplingParams(top_p=0.5, max_new_tokens=1)),
        ("flat rows: a nucleus wider than the candidates", SamplingParams(top_p=0.9, max_new_tokens=1)),
        ("top-k as large as the vocabulary", SamplingParams(top_k=3000, top_p=0.9, max_new_tokens=1)),
        ("top-k 1, a 3-way tie at the largest score", SamplingParams(top_k=1, max_new_tokens=1)),
        ("-inf scores, top-k beyond the finite ones", SamplingParams(top_k=5, top_p=0.95, max_new_tokens=1)),
    ],
)
def test_edge_rows_draw_only_what_the_learner_keeps(case, params):
    g = torch.Generator().manual_seed(2)
    if case.startswith("tie group"):
        logits = torch.full((1, 3000), -20.0)
        logits[0, :255] = torch.linspace(5, 4, 255)
        logits[0, 1000:1010] = 3.0  # 10 ids tied: the 256th candidate is one of them, the rest are not candidates
    elif case.startswith("flat"):
        logits = torch.randn(3, 3000, generator=g) * 0.01
    elif case.startswith("top-k 1"):
        logits = torch.randn(2, 3000, generator=g)
        logits[:, [5, 900, 2999]] = 10.0
    elif case.startswith("-inf"):
        logits = torch.full((2, 3000), float("-inf"))
        logits[0, [4, 8]] = torch.tensor([1.0, 0.5])
        logits[1, 77] = 3.0
    else:
        logits = torch.randn(3, 3000, generator=g) * 3
    kept = _learner_kept(logits, params)
    drawn: list[set[int]] = [set() for _ in kept]
    for seed in range(40):
        ids, logprobs = sample(logits, params, _generators(len(kept), seed))
        learner = sampling_log_probs(logits, params).gather(-1, ids[:, None]).squeeze(-1)
        torch.testing.assert_close(logprobs, learner, atol=1e-6, rtol=0)
        for row, token in enumerate(ids.tolist()):
            drawn[row].add(token)
    for row_kept, row_drawn in zip(kept, drawn, strict=True):
        assert row_drawn <= row_kept
    if case.startswith("top-k 1"):
        assert drawn[0] == {5, 900, 2999}


@pytest.mark.parametrize("draw", [0.0, 0.5, 1.0 - 2**-53, 1.0])
def test_the_candidates_path_never_draws_zero_mass_at_any_draw(draw, monkeypatch):
    """Candidates of -inf score (rows with fewer finite ids than k) are never drawn, whatever the draw."""
    import mgrpo_actors.engines.sampler as sampler

    monkeypatch.setattr(sampler, "inverse_transform", _refuse)
    logits = torch.full((2, 700), float("-inf"))
    logits[0, [5, 600]] = 0.0
    logits[1, 650] = 1.0
    logits[1, 2] = -200.0
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.tensor(draw, dtype=torch.float64))
    ids, logprobs = sample(logits, SamplingParams(top_k=3, top_p=0.999, max_new_tokens=1), _generators(2, 0))
    assert ids[0].item() in {5, 600} and ids[1].item() in {650, 2}
    assert bool(torch.isfinite(logprobs).all())
