"""`chunked_token_log_probs`: the sampling distribution's logprobs from hidden states and the lm_head, a
chunk of positions at a time, equal in value and gradient to `token_log_probs` of the full logits
(fp32, 1e-5), without keeping any chunk's [positions, vocab] tensors for backward."""

from __future__ import annotations

import pytest
import torch

from mgrpo_actors.engines.base import SamplingParams
from mgrpo_actors.engines.logprobs import chunked_token_log_probs, sampling_log_probs, token_log_probs

SETTINGS = {
    "temperature 1": SamplingParams(temperature=1.0),
    "temperature 0.7": SamplingParams(temperature=0.7),
    "top-k 5": SamplingParams(temperature=1.0, top_k=5),
    "top-p 0.8": SamplingParams(temperature=0.9, top_p=0.8),
    "top-k and top-p": SamplingParams(temperature=0.7, top_k=8, top_p=0.9),
}
POSITIONS, HIDDEN, VOCAB = 37, 16, 50


def _case(params: SamplingParams, seed: int = 0):
    """Hidden states, an lm_head weight, targets drawn from the sampling distribution (inside top-k/top-p)."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(POSITIONS, HIDDEN, generator=g)
    weight = torch.randn(VOCAB, HIDDEN, generator=g)
    probs = torch.exp(sampling_log_probs(hidden @ weight.T, params))
    targets = torch.multinomial(probs, 1, generator=g)[:, 0]
    upstream = torch.randn(POSITIONS, generator=g)  # a loss that weighs each position differently
    return hidden, weight, targets, upstream


def _value_and_grads(fn, hidden, weight, upstream):
    hidden, weight = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    values = fn(hidden, weight)
    (values * upstream).sum().backward()
    return values.detach(), hidden.grad, weight.grad


@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("chunk", [8, 1, POSITIONS, 0])
def test_chunked_logprobs_and_gradients_equal_the_full_log_softmax(name, chunk):
    params = SETTINGS[name]
    hidden, weight, targets, upstream = _case(params)
    full = _value_and_grads(lambda h, w: token_log_probs(h @ w.T, targets, params), hidden, weight, upstream)
    ours = _value_and_grads(
        lambda h, w: chunked_token_log_probs(h, w, targets, params, chunk), hidden, weight, upstream
    )
    assert bool(torch.isfinite(full[0]).all())  # the targets are inside the sampling distribution's support
    for expected, got in zip(full, ours):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_a_module_head_and_no_grad_give_the_same_values():
    params = SETTINGS["top-p 0.8"]
    hidden, weight, targets, _ = _case(params, seed=1)
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=True)
    with torch.no_grad():
        head.weight.copy_(weight)
        expected = token_log_probs(head(hidden), targets, params)
        got = chunked_token_log_probs(hidden, head, targets, params, 5)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def _largest_saved(fn) -> int:
    """The most elements of any tensor autograd keeps for backward while `fn` runs."""
    largest = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal largest
        largest = max(largest, tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return largest


def test_chunks_keep_no_logits_for_backward():
    """Several chunks: no [positions, vocab] or [chunk, vocab] tensor is saved (each chunk is recomputed in
    backward); the unchunked computation keeps its log-softmax of [positions, vocab]."""
    params = SETTINGS["top-k 5"]
    hidden, weight, targets, _ = _case(params)
    hidden.requires_grad_()
    weight.requires_grad_()
    whole = _largest_saved(lambda: token_log_probs(hidden @ weight.T, targets, params))
    chunked = _largest_saved(lambda: chunked_token_log_probs(hidden, weight, targets, params, 8))
    assert whole >= POSITIONS * VOCAB
    assert chunked < 8 * VOCAB, chunked  # never a chunk's logits


def _by_hand(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The sampling distribution's log-probabilities [positions, vocab] written out in plain torch, without
    transformers' warpers: logits / T; top-k keeps the k largest (ties with the k-th too); top-p keeps, in
    descending order, every token whose predecessors' mass is < p (at least one); log-softmax over the rest."""
    z = logits / temperature
    neg_inf = torch.full_like(z, float("-inf"))
    if top_k > 0:
        kth = torch.topk(z, top_k, dim=-1).values[:, -1:]
        z = torch.where(z < kth, neg_inf, z)
    if top_p < 1.0:
        probs = torch.softmax(z, dim=-1)
        order = torch.argsort(probs, dim=-1, descending=True)
        sorted_probs = probs.gather(-1, order)
        keep_sorted = (sorted_probs.cumsum(-1) - sorted_probs) < top_p
        keep_sorted[:, 0] = True
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        z = torch.where(keep, z, neg_inf)
    return torch.log_softmax(z, dim=-1)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 6, 1.0), (0.9, 0, 0.8), (0.6, 9, 0.85)]
)
@pytest.mark.parametrize(("positions", "chunk"), [(36, 12), (36, 7), (36, 36), (5, 0)])
def test_chunked_logprobs_equal_a_hand_written_sampling_distribution(temperature, top_k, top_p, positions, chunk):
    """Against an independent plain-torch computation (not token_log_probs): values and the gradients w.r.t.
    the hidden states and the lm_head weight, for chunks that divide the positions (12 of 36) and do not (7),
    a single chunk, and no chunking."""
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    g = torch.Generator().manual_seed(positions * 100 + chunk)
    hidden = torch.randn(positions, HIDDEN, generator=g)
    weight = torch.randn(VOCAB, HIDDEN, generator=g)
    with torch.no_grad():
        support = torch.exp(_by_hand(hidden @ weight.T, temperature, top_k, top_p))
    targets = torch.multinomial(support, 1, generator=g)[:, 0]  # inside the hand-written support
    upstream = torch.randn(positions, generator=g)

    def by_hand(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return _by_hand(h @ w.T, temperature, top_k, top_p).gather(-1, targets[:, None])[:, 0]

    expected = _value_and_grads(by_hand, hidden, weight, upstream)
    got = _value_and_grads(lambda h, w: chunked_token_log_probs(h, w, targets, params, chunk), hidden, weight, upstream)
    assert bool(torch.isfinite(expected[0]).all())
    assert bool((support > 0).all()) == (top_k == 0 and top_p == 1.0)  # top-k/top-p do cut tokens here
    for want, have in zip(expected, got):
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-5)
