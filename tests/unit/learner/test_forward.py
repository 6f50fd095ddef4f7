"""The learner's logprobs from the last hidden states and the lm_head per chunk of loss positions
(learner/forward.py) equal those of the model's own logits, in value and in every parameter's gradient,
on a tiny model whose lm_head is tied to its input embedding."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from mgrpo_actors.alignment.batch_rows import BatchRow, rows_to_batch
from mgrpo_actors.engines.logprobs import token_log_probs
from mgrpo_actors.learner.forward import chunkable, micro_batch_log_probs
from mgrpo_actors.learner.micro_batches import micro_batches
from mgrpo_actors.models.loader import load_model

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_model("tiny:main")
    return model.float().train(), tokenizer


def _micro_batch(model, temperature: float, top_k: int, top_p: float):  # noqa: ANN001, ANN202
    """Three rows of random tokens of different lengths (right-padded), prompts off the loss mask."""
    rng = np.random.default_rng(3)
    rows = []
    for i, n in enumerate((9, 14, 6)):
        ids = rng.integers(3, model.config.vocab_size, n).astype(np.int32)
        mask = np.array([0] * (i + 2) + [1] * (n - i - 2), np.uint8)
        rows.append(
            BatchRow(
                f"q/a/r{i}", "original", ids, mask, np.zeros(n, np.float32), 1.0, 1.0, 0.0, 0, temperature, top_p, top_k
            )
        )
    (mb,) = micro_batches(rows_to_batch("r", "main", 0, "b", rows), 8, 0)
    return mb


def _compare_with_full_logits(model, mb, chunk, weights):
    """The weighted sum of `mb`'s logprobs backpropagated through two copies of `model`: the model's own full
    logits and `micro_batch_log_probs` with `chunk`; asserts values (where finite) and every parameter's
    gradient equal. Returns (full, ours, finite, ours_model)."""
    on = mb.loss_mask > 0
    full_model = copy.deepcopy(model)
    logits = full_model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
    full = token_log_probs(logits, mb.targets, mb.sampling)
    # targets are random ids: outside top-k/top-p some are -inf; compare where both are finite
    finite = torch.isfinite(full) & on
    (torch.where(finite, full, 0.0) * weights).sum().backward()

    ours_model = copy.deepcopy(model)
    ours = micro_batch_log_probs(ours_model, ours_model, mb, chunk, "cpu")
    (torch.where(finite, ours, 0.0) * weights).sum().backward()

    torch.testing.assert_close(ours[finite], full[finite], rtol=1e-5, atol=1e-5)
    expected = dict(full_model.named_parameters())
    for name, param in ours_model.named_parameters():
        torch.testing.assert_close(param.grad, expected[name].grad, rtol=1e-5, atol=1e-5, msg=name)
    return full, ours, finite, ours_model


def test_the_tiny_model_ties_its_head_and_is_chunkable(tiny):
    model, _ = tiny
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert chunkable(model, model) and model.training


@pytest.mark.parametrize("field", ["final_logit_softcapping", "logit_scale", "logits_scaling"])
def test_a_config_that_transforms_the_logits_is_not_chunkable(field):
    """A soft-cap of 30 on a fresh model's logits (well under 1) changes them by less than the check's tolerance, so
    the config itself refuses: the learner and the warm-up keep the full logits."""
    from mgrpo_actors.models.loader import load_model

    model, _ = load_model("tiny:main")
    assert chunkable(model, model)
    setattr(model.config, field, 30.0)
    assert not chunkable(model, model)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 300, 1.0), (0.8, 0, 0.9)]
)
@pytest.mark.parametrize("chunk", [4, 1024])
def test_chunked_logprobs_and_gradients_equal_the_full_logits(tiny, temperature, top_k, top_p, chunk):
    model, _ = tiny
    mb = _micro_batch(model, temperature, top_k, top_p)
    on = mb.loss_mask > 0
    weights = torch.randn(on.shape, generator=torch.Generator().manual_seed(0)) * on

    full, ours, finite, ours_model = _compare_with_full_logits(model, mb, chunk, weights)

    assert bool(finite.any()) and bool((ours[~on] == 0).all())  # off the loss mask: no logprob computed


def test_no_chunk_is_the_models_own_logits(tiny):
    model, _ = tiny
    mb = _micro_batch(model, 1.0, 0, 1.0)
    with torch.no_grad():
        expected = token_log_probs(
            model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1], mb.targets, mb.sampling
        )
        got = micro_batch_log_probs(model, model, mb, None, "cpu")
    torch.testing.assert_close(got, expected)


def _rows_micro_batch(model, masks: list[list[int]], temperature: float, top_k: int, top_p: float):  # noqa: ANN001, ANN202
    """One row of random tokens per loss mask given (right-padded: rows of different lengths)."""
    rng = np.random.default_rng(5)
    rows = []
    for i, mask in enumerate(masks):
        ids = rng.integers(3, model.config.vocab_size, len(mask)).astype(np.int32)
        rows.append(
            BatchRow(
                f"q/a/r{i}",
                "original",
                ids,
                np.array(mask, np.uint8),
                np.zeros(len(mask), np.float32),
                1.0,
                1.0,
                0.0,
                0,
                temperature,
                top_p,
                top_k,
            )
        )
    (mb,) = micro_batches(rows_to_batch("r", "main", 0, "b", rows), 8, 0)
    return mb


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.8, 800, 1.0), (2.0, 0, 0.99)])
def test_a_row_without_loss_tokens_and_chunks_that_do_not_divide_the_positions(tiny, temperature, top_k, top_p):
    """Rows of 9, 12 and 6 tokens, the middle one without loss tokens: 7 + 2 = 9 loss positions in chunks of
    4 (4 + 4 + 1). Values on the loss positions and every parameter's gradient (the tied embedding
    included) equal the model's own logits'; the row without loss tokens gets 0 everywhere."""
    model, _ = tiny
    mb = _rows_micro_batch(model, [[0, 0] + [1] * 7, [0] * 12, [0] * 4 + [1] * 2], temperature, top_k, top_p)
    on = mb.loss_mask > 0
    quiet = mb.sample_ids.index("q/a/r1")  # micro-batches order rows longest first
    assert int(on.sum()) == 9 and not bool(on[quiet].any())
    weights = torch.randn(on.shape, generator=torch.Generator().manual_seed(1)) * on

    full, ours, finite, ours_model = _compare_with_full_logits(model, mb, 4, weights)

    assert int(finite.sum()) >= 5 and bool((ours[~on] == 0).all()) and bool((ours[quiet] == 0).all())
    embedding = ours_model.get_input_embeddings().weight
    assert embedding.grad is not None and float(embedding.grad.abs().sum()) > 0


def test_a_micro_batch_without_loss_tokens_still_reaches_the_head_with_zero_gradients(tiny):
    """No loss token at all (a stand-in): one position is scored anyway, so every parameter, the tied lm_head
    and embedding included, gets a gradient, and it is exactly 0 under the loss mask."""
    model, _ = tiny
    mb = _rows_micro_batch(model, [[0] * 7, [0] * 5], 1.0, 0, 1.0)
    ours_model = copy.deepcopy(model)
    ours = micro_batch_log_probs(ours_model, ours_model, mb, 4, "cpu")
    assert ours.shape == mb.targets.shape and int((ours != 0).sum()) <= 1
    (ours * mb.loss_mask).sum().backward()
    for name, param in ours_model.named_parameters():
        assert param.grad is not None and not bool(param.grad.any()), name


def test_no_dropout_makes_train_mode_score_as_the_engines_sample():
    from transformers import LlamaConfig, LlamaForCausalLM

    from mgrpo_actors.learner.forward import no_dropout

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attention_dropout=0.5,
    )
    model = LlamaForCausalLM(config)
    model.model.embed_tokens = torch.nn.Sequential(model.model.embed_tokens, torch.nn.Dropout(0.3))
    ids = torch.arange(12)[None] % 64
    model.eval()
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        model.train()
        noisy = model(input_ids=ids).logits
    assert not torch.allclose(noisy, expected)  # dropout is really on in train mode before
    assert no_dropout(model) == 3  # two attention layers' attention_dropout and the nn.Dropout
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, expected)
    assert no_dropout(model) == 0
