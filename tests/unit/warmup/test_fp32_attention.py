"""The warm-up's attention under bf16 autocast (warmup/fp32_attention.py): transformers' sdpa on fp32 copies of the
inputs, its output in bf16 (without autocast, transformers' sdpa as it is); selected for the training only, the
model's own attention restored after it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from mgrpo_actors.models.loader import load_model
from mgrpo_actors.warmup.fp32_attention import FP32_UP_TO, NAME, fp32_attention, fp32_sdpa
from mgrpo_actors.warmup.supervised import TextSample, WarmupConfig, warm_up_trajectories


def _inputs(requires_grad: bool = False, positions: int = 9) -> tuple[torch.Tensor, ...]:
    """Query [2, 4, positions, 16] and key and value [2, 2, positions, 16] in bf16: tiny:main's heads (4 query heads
    sharing 2 key/value heads) and head size."""
    generator = torch.Generator().manual_seed(positions)
    shapes = ((2, 4, positions, 16), (2, 2, positions, 16), (2, 2, positions, 16))
    return tuple(
        torch.randn(shape, generator=generator).to(torch.bfloat16).requires_grad_(requires_grad) for shape in shapes
    )


def test_bf16_inputs_are_attended_in_fp32_and_the_output_rounded_to_bf16():
    model, _ = load_model("tiny:main")
    layer = model.model.layers[0].self_attn
    query, key, value = _inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = fp32_sdpa(layer, query, key, value, None, scaling=0.25)
    expected, _ = sdpa_attention_forward(layer, query.float(), key.float(), value.float(), None, scaling=0.25)
    assert out.dtype == torch.bfloat16 and expected.dtype == torch.float32
    torch.testing.assert_close(out, expected.to(torch.bfloat16), rtol=0, atol=0)
    # a Llama's mix (fp32 queries and keys after the rotary embedding, bf16 values): the same fp32 computation
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed, _ = fp32_sdpa(layer, query.float(), key.float(), value, None, scaling=0.25)
    torch.testing.assert_close(mixed, out, rtol=0, atol=0)
    # autocast's own sdpa (the bf16 kernel) is not what this computes: only equal within bf16 rounding
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16, _ = sdpa_attention_forward(layer, query, key, value, None, scaling=0.25)
    torch.testing.assert_close(out, bf16, rtol=2e-2, atol=2e-2)


def test_an_additive_mask_is_taken_in_fp32_and_long_sequences_keep_autocast_s_bf16():
    model, _ = load_model("tiny:main")
    layer = model.model.layers[0].self_attn
    query, key, value = _inputs()
    additive = torch.zeros(2, 1, 9, 9).masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = fp32_sdpa(layer, query, key, value, additive.to(torch.bfloat16), is_causal=False)
    expected, _ = sdpa_attention_forward(layer, query.float(), key.float(), value.float(), additive, is_causal=False)
    torch.testing.assert_close(out, expected.to(torch.bfloat16), rtol=0, atol=0)
    # past FP32_UP_TO query positions: autocast's own sdpa, as without this attention
    long = _inputs(positions=FP32_UP_TO + 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = fp32_sdpa(layer, *long, None)
        own, _ = sdpa_attention_forward(layer, *long, None)
    torch.testing.assert_close(out, own, rtol=0, atol=0)
    fp32 = sdpa_attention_forward(layer, *(t.float() for t in long), None)[0].to(torch.bfloat16)
    assert not torch.equal(out, fp32)  # the bf16 kernel, not the fp32 one


def test_without_autocast_the_inputs_go_to_sdpa_as_they_are_and_under_it_gradients_flow():
    model, _ = load_model("tiny:main")
    layer = model.model.layers[0].self_attn
    for query, key, value in ([t.detach().float() for t in _inputs()], _inputs()):
        out, _ = fp32_sdpa(layer, query, key, value, None)
        assert out.dtype == query.dtype
        torch.testing.assert_close(out, sdpa_attention_forward(layer, query, key, value, None)[0], rtol=0, atol=0)
    query, key, value = _inputs(requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = fp32_sdpa(layer, query, key, value, None)
    out.float().square().sum().backward()
    for tensor in (query, key, value):
        assert tensor.grad is not None and tensor.grad.dtype == torch.bfloat16 and bool(tensor.grad.abs().sum() > 0)


def test_the_context_selects_it_for_sdpa_models_and_restores_their_own_however_it_ends():
    model, _ = load_model("tiny:main")
    assert model.config._attn_implementation == "sdpa"
    with fp32_attention(model) as selected:
        assert selected and model.config._attn_implementation == NAME
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError), fp32_attention(model):
        raise RuntimeError("a warm-up interrupted")
    assert model.config._attn_implementation == "sdpa"
    model.config._attn_implementation = "eager"
    with fp32_attention(model) as selected:
        assert not selected and model.config._attn_implementation == "eager"


def test_a_bf16_warm_up_trains_on_it_and_leaves_the_model_on_sdpa(monkeypatch):
    from mgrpo_actors.warmup import fp32_attention as module

    seen = []

    def spy(*args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu"))
        return fp32_sdpa(*args, **kwargs)

    monkeypatch.setattr(module, "fp32_sdpa", spy)  # what the context registers under NAME
    model, _ = load_model("tiny:main")
    page = TextSample(np.arange(3, 40))
    cfg = WarmupConfig(steps=2, batch_size=2, lr=1e-3)
    losses = warm_up_trajectories(model, [page], cfg, compute_dtype="bfloat16").losses
    assert len(losses) == 2 and all(loss > 0 for loss in losses)
    assert len(seen) == 2 * 2 * model.config.num_hidden_layers  # every layer of every pass (2 steps, 1 pass each)
    assert set(seen) == {True}
    assert model.config._attn_implementation == "sdpa"
