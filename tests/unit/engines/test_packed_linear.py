"""Packed bf16 linear layers (engines/packed_linear.py): F.linear's product (the same bits where this CPU's oneDNN
computes both alike), rebuilt whenever a weight changes, F.linear wherever packing does not apply, and a bf16
engine that samples on the weights it was last given."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from mgrpo_actors.engines import SamplingParams, make_engine, packed_linear
from mgrpo_actors.engines.base import EngineConfig
from mgrpo_actors.engines.packed_linear import pack_linears, packing_available
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.weights.delta import SparseChange, WeightsDelta

needs_packing = pytest.mark.skipif(
    not packing_available(torch.bfloat16, torch.device("cpu")), reason="this CPU's oneDNN has no bf16 kernels"
)


def _packed_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The packed product on a weight packed just now: what a layer must give whatever it packed before."""
    packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _two_layers_packed_now(model: torch.nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """`_layers`' forward (no bias) on weights packed just now."""
    return _packed_product(_packed_product(x, model[0].weight), model[1].weight)


def _same_bits_here() -> bool:
    """Whether this CPU's packed product gives F.linear's bits (measured so on a Xeon with AMX-BF16)."""
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(7, 64, generator=g).bfloat16(), torch.randn(96, 64, generator=g).bfloat16()
    with torch.inference_mode():
        return torch.equal(_packed_product(x, w), F.linear(x, w))


def _layers(bias: bool) -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 96, bias=bias), torch.nn.Linear(96, 32, bias=bias)).bfloat16()


@needs_packing
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 64), (8, 64), (2, 5, 64)])
def test_packed_layers_give_f_linear_s_product(bias, shape, monkeypatch):
    model = _layers(bias)
    x = torch.randn(*shape).bfloat16()
    same_bits = _same_bits_here()
    with torch.inference_mode():
        expected = F.linear(F.linear(x, model[0].weight, model[0].bias), model[1].weight, model[1].bias)
        packed = pack_linears(model)
        assert packed is not None and packed.layers == 2

        def refuse(*args, **kwargs):
            raise AssertionError("F.linear ran instead of the packed product")

        monkeypatch.setattr(packed_linear.F, "linear", refuse)
        out = model(x)
    torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)  # bf16 rounding at most
    if same_bits:
        assert torch.equal(out, expected)


@needs_packing
def test_a_weight_changed_in_place_is_packed_again():
    model = _layers(bias=False)
    pack_linears(model)
    x = torch.randn(4, 64).bfloat16()
    with torch.inference_mode():
        before = model(x)
        model[0].weight.mul_(2)  # as a weight load does: copy_ into the existing tensor
        after = model(x)
        expected = _two_layers_packed_now(model, x)
    assert not torch.equal(before, after)
    assert torch.equal(after, expected)


@needs_packing
def test_gradients_still_flow_through_a_packed_model():
    model = _layers(bias=True)
    pack_linears(model)
    model(torch.randn(3, 64).bfloat16()).float().sum().backward()
    assert model[0].weight.grad is not None and bool(model[0].weight.grad.abs().sum() > 0)


def test_nothing_is_packed_in_float32():
    model = _layers(bias=False).float()
    assert pack_linears(model) is None
    assert "forward" not in vars(model[0])  # the layer's own forward


@needs_packing
def test_a_bf16_engine_samples_the_same_with_and_without_packed_weights():
    if not _same_bits_here():
        pytest.skip("this CPU's packed product rounds differently from F.linear: the samples may differ")
    prompts = [[1, 5, 9, 14, 2], [3, 7, 7], [11, 4, 8, 15, 16, 23]]
    params = SamplingParams(temperature=0.8, top_k=20, max_new_tokens=12, seed=7)
    runs = []
    for pack in (True, False):
        model, tokenizer = load_model("tiny:main")
        engine = make_engine("hf", model, tokenizer, EngineConfig(dtype="bfloat16"))
        if not pack:  # the layers' own forward back
            for layer in engine.model.modules():
                vars(layer).pop("forward", None)
        else:
            assert engine.packed is not None and engine.packed.layers > 0
        runs.append(engine.generate(prompts, params))
    for packed, plain in zip(*runs, strict=True):
        assert packed.token_ids == plain.token_ids
        np.testing.assert_array_equal(packed.logprobs, plain.logprobs)


@needs_packing
def test_a_weight_replaced_by_another_tensor_is_packed_again():
    model = _layers(bias=False)
    pack_linears(model)
    x = torch.randn(4, 64).bfloat16()
    with torch.no_grad():
        model(x)
        model[0].weight.data = torch.randn(96, 64).bfloat16()  # a new tensor: its version counter starts afresh
        assert torch.equal(model(x), _two_layers_packed_now(model, x))


@needs_packing
def test_a_weight_replaced_where_an_old_one_was_freed_is_packed_again():
    """The packed entry holds the weight it packed, so a replacement can never take its address."""
    model = _layers(bias=False)
    pack_linears(model)
    x = torch.randn(4, 64).bfloat16()
    with torch.no_grad():
        model(x)
        model[0].weight.data = torch.randn(96, 64).bfloat16()
        model(x)
        model[0].weight.data = torch.empty(96, 64, dtype=torch.bfloat16).normal_()
        assert torch.equal(model(x), _two_layers_packed_now(model, x))


def _bf16_engine():
    model, tokenizer = load_model("tiny:main")
    return make_engine("hf", model, tokenizer, EngineConfig(dtype="bfloat16"))


def _changed(engine, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        name: (p.float() + 0.5 * torch.randn(p.shape, generator=g)).bfloat16()
        for name, p in engine.model.named_parameters()
    }


@needs_packing
@pytest.mark.parametrize("how", ["file", "sparse delta"])
def test_weights_loaded_into_a_bf16_engine_reach_its_packed_layers(how, tmp_path):
    """load_weights writes the file's bytes (or a delta's elements) straight into the weights' storage: the next
    generation runs on them, as a fresh engine packed from the loaded weights does."""
    prompts = [[1, 5, 9, 14, 2], [3, 7, 7]]
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    engine = _bf16_engine()
    engine.generate(prompts, params)
    new = _changed(engine, seed=1)
    if how == "file":
        save_file({name: t.contiguous() for name, t in new.items()}, str(tmp_path / "model.safetensors"))
        engine.load_weights(str(tmp_path), version=1)
    else:
        sparse = {}
        for name, tensor in new.items():
            index = torch.arange(0, tensor.numel(), 2, dtype=torch.int32)
            values = tensor.reshape(-1)[index.long()]
            sparse[name] = SparseChange(shape=tuple(tensor.shape), indices=index, values=values)
        delta = WeightsDelta(version=1, base=0, base_sha256="", whole={}, sparse=sparse)
        engine.load_weights(delta, version=1)
    loaded = engine.generate(prompts, params)
    model, tokenizer = load_model("tiny:main")
    model.load_state_dict(engine.model.state_dict())  # the loaded weights, before anything is packed
    expected = make_engine("hf", model, tokenizer, EngineConfig(dtype="bfloat16")).generate(prompts, params)
    for a, b in zip(loaded, expected, strict=True):
        assert a.token_ids == b.token_ids
        np.testing.assert_array_equal(a.logprobs, b.logprobs)
