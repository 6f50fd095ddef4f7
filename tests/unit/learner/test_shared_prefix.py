"""A micro-batch's shared prefix computed once (learner/shared_prefix.py) gives the logprobs and every
parameter's gradient of the whole-row forward, on a tiny Llama-style model (grouped-query heads) and a
tiny Qwen2-style one, chunked and unchunked, rows of different lengths right-padded; its length stops
before the first loss target and leaves each row a token; the trainer takes the same step with it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.alignment.batch_rows import BatchRow, rows_to_batch
from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.learner.forward import micro_batch_log_probs
from mgrpo_actors.learner.micro_batches import micro_batches
from mgrpo_actors.learner.shared_prefix import shared_prefix_length
from mgrpo_actors.learner.trainer import PolicyTrainer
from mgrpo_actors.models.families import takes_external_cache
from mgrpo_actors.models.loader import load_model

pytestmark = pytest.mark.timeout(300)

PREFIX = 12  # tokens every row shares


@pytest.fixture(scope="module", params=["tiny:main", "tiny:grpo"])
def tiny(request):
    model, tokenizer = load_model(request.param)
    return model.float().train(), tokenizer


def _rows(vocab: int, lengths=(30, 21, 26), prompt=(16, 14, 18), seed: int = 3) -> list[BatchRow]:
    """Rows starting with the same PREFIX ids, then their own; each row's first `prompt` tokens are off the
    loss mask; advantages alternate in sign."""
    rng = np.random.default_rng(seed)
    shared = rng.integers(3, vocab, PREFIX)
    rows = []
    for i, (n, p) in enumerate(zip(lengths, prompt, strict=True)):
        ids = np.concatenate([shared, rng.integers(3, vocab, n - PREFIX)]).astype(np.int32)
        mask = (np.arange(n) >= p).astype(np.uint8)
        advantage = 1.0 if i % 2 == 0 else -0.5
        rows.append(BatchRow(f"q/a/r{i}", "original", ids, mask, np.zeros(n, np.float32), advantage, 1.0, 0.0, 0))
    return rows


def _micro_batch(vocab: int, **kwargs):  # noqa: ANN003, ANN202
    (mb,) = micro_batches(rows_to_batch("r", "main", 0, "b", _rows(vocab, **kwargs)), 8, 0)
    return mb


def test_the_prefix_stops_before_the_first_loss_target_and_leaves_each_row_a_token(tiny):
    model, _ = tiny
    vocab = model.config.vocab_size
    # The rows share 12 ids; target j is predicted at position j, the first loss token is token 14 (target 13).
    assert shared_prefix_length(_micro_batch(vocab), min_tokens=4) == PREFIX
    assert shared_prefix_length(_micro_batch(vocab, prompt=(16, 9, 18)), min_tokens=4) == 8
    assert shared_prefix_length(_micro_batch(vocab), min_tokens=PREFIX + 1) == 0  # shorter than asked: off
    one = micro_batches(rows_to_batch("r", "main", 0, "b", _rows(vocab)[:1]), 8, 0)[0]
    assert shared_prefix_length(one, min_tokens=1) == 0  # a single row shares with nobody
    # Identical rows: the prefix still leaves the last token (and stops at the first loss target).
    same = _rows(vocab)
    twin = BatchRow("q/a/r9", "original", same[0].token_ids, same[0].loss_mask, same[0].logprobs, 1.0, 1.0, 0.0, 0)
    twins = [same[0], twin]
    (mb,) = micro_batches(rows_to_batch("r", "main", 0, "b", twins), 8, 0)
    assert shared_prefix_length(mb, min_tokens=1) == 15


@pytest.mark.parametrize("chunk", [None, 5])
def test_logprobs_and_gradients_equal_the_whole_rows(tiny, chunk):
    model, _ = tiny
    assert takes_external_cache(model)
    mb = _micro_batch(model.config.vocab_size)
    prefix = shared_prefix_length(mb, min_tokens=4)
    assert prefix == PREFIX
    weights = torch.randn(mb.targets.shape, generator=torch.Generator().manual_seed(0)) * mb.loss_mask

    # float64, so that what differs is rounding alone, far below any real difference
    whole_model, shared_model = copy.deepcopy(model).double(), copy.deepcopy(model).double()
    whole = micro_batch_log_probs(whole_model, whole_model, mb, chunk, "cpu")
    shared = micro_batch_log_probs(shared_model, shared_model, mb, chunk, "cpu", prefix=prefix)
    (whole * weights).sum().backward()
    (shared * weights).sum().backward()

    on = mb.loss_mask > 0
    torch.testing.assert_close(shared[on], whole[on], rtol=1e-5, atol=1e-5)
    assert bool((shared[:, :prefix] == 0).all())  # the prefix predicts no loss target
    expected = dict(whole_model.named_parameters())
    for name, param in shared_model.named_parameters():
        # another summation order: equal to rounding (the logprobs themselves are float32), relative to the
        # gradient's scale (the tied embedding's entries reach ~80)
        scale = float(expected[name].grad.abs().max())
        torch.testing.assert_close(param.grad, expected[name].grad, rtol=1e-5, atol=1e-6 * scale, msg=name)


def test_the_trainer_accumulates_the_same_gradients_with_the_prefix_shared(tiny):
    model, tokenizer = tiny
    batch = rows_to_batch("r", "main", 0, "b", _rows(model.config.vocab_size))
    results = {}
    for tokens in (0, 4):
        cfg = LearnerConfig(lr=1e-3, micro_batch_samples=8, shared_prefix_tokens=tokens, zero_stage=0)
        trainer = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id or 0, cfg, ObjectiveConfig())
        assert trainer.shared_prefix == (tokens > 0)
        totals, micro, samples = trainer.accumulate(batch)
        assert (micro, samples) == (1, 3)
        grads = {n: p.grad.detach().clone() for n, p in trainer.module.named_parameters()}
        results[tokens] = (totals, grads)
        trainer.engine.step()  # the step itself runs on the accumulated gradients
    (whole_totals, whole_grads), (shared_totals, shared_grads) = results[0], results[4]
    assert shared_totals["tokens"] == whole_totals["tokens"]
    assert shared_totals["loss"] == pytest.approx(whole_totals["loss"], rel=1e-5, abs=1e-7)
    assert any(float(g.abs().max()) > 0 for g in whole_grads.values())
    for name, grad in shared_grads.items():
        # float32 in another summation order: Qwen2's biased projections differ by up to ~2e-5 of the scale
        scale = float(whole_grads[name].abs().max())
        torch.testing.assert_close(grad, whole_grads[name], rtol=1e-4, atol=1e-4 * scale, msg=name)


def test_rows_without_a_loss_target_share_nothing_and_the_chunked_trainer_steps(tiny):
    # Two trainable rows identical up to their last token, with no loss target: the prefix would leave their
    # own pass no position (the chunked path indexed an empty tensor); the trainer must still accumulate.
    model, tokenizer = tiny
    rows = _rows(model.config.vocab_size)[:2]
    ids = rows[0].token_ids[:20].copy()
    other = ids.copy()
    other[-1] = (other[-1] + 1) % model.config.vocab_size
    quiet = np.zeros(20, np.uint8)
    rows += [
        BatchRow(f"q/a/r{i}", "original", t, quiet, np.zeros(20, np.float32), a, 1.0, 0.0, 0)
        for i, t, a in ((7, ids, 1.0), (8, other, -1.0))
    ]
    batch = rows_to_batch("r", "main", 0, "b", rows)
    (mb,) = micro_batches(batch, 2, 0, rows=[2, 3])
    assert shared_prefix_length(mb, min_tokens=1) == 0
    counts = {}
    for tokens in (0, 4):
        cfg = LearnerConfig(micro_batch_samples=2, shared_prefix_tokens=tokens, zero_stage=0, logprob_chunk_tokens=8)
        trainer = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id or 0, cfg, ObjectiveConfig())
        counts[tokens] = trainer.accumulate(batch)[1:]
    assert counts[4] == counts[0]


def test_eager_attention_never_takes_the_prefix_path(tiny):
    # Eager attention adds a mask to its scores: the prefix path's boolean mask would mask nothing there.
    model, tokenizer = tiny
    eager = copy.deepcopy(model)
    eager.config._attn_implementation = "eager"
    cfg = LearnerConfig(micro_batch_samples=8, shared_prefix_tokens=4, zero_stage=0)
    assert not PolicyTrainer(eager, tokenizer.pad_token_id or 0, cfg, ObjectiveConfig()).shared_prefix
    assert PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id or 0, cfg, ObjectiveConfig()).shared_prefix
