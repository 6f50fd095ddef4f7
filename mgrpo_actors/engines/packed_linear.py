"""bf16 linear layers of a CPU rollout engine with their weights packed once for oneDNN: `pack_linears`.

torch computes a bf16 `F.linear` on a CPU through oneDNN, which reorders the weight into its blocked
layout on every call: at decode sizes (a few rows against a weight of megabytes) that reorder is much of
the call. Packing each weight once (`torch.ops.mkldnn._reorder_linear_weight`, as PyTorch's inductor does
for frozen CPU graphs) and calling the packed product (`_linear_pointwise`) computes the same product faster
(the same bits on a Xeon with AMX-BF16; where a CPU's oneDNN rounds the two differently, within bf16 rounding,
and the engine's behaviour logprobs are those of what it computed; tests/unit/engines/test_packed_linear.py):
SmolLM2's 211 linear layers one after another, weights streamed from memory as in a decode step (2-core
Xeon with AMX-BF16), 25.7 -> 17.0 ms at batch 1 and 28.8 -> 20.2 ms at batch 32, i.e. 10 -> 13-16 GB/s.

The model stays transformers' own: each `nn.Linear` keeps its weight (what weight loads copy into and
`state_dict` returns); only its forward is replaced, on the engine's copy of the model. A packed copy is
rebuilt whenever its weight changed: the engine repacks after every weight load (engines/hf.py), and a
layer repacks by itself when its weight was written in place by anyone (the tensor's version counter
moved; the weight loaders' numpy writes move it too) or replaced by another tensor, so it never serves
stale weights. fp32 stays on `F.linear`: there the packed product is not the same bits even on that Xeon,
and fp32 engines promise logprobs equal to the learner's recomputation. Where autograd needs the product (gradients on,
and a weight or an input that requires them), the layer falls back to `F.linear`. The price: a second
copy of every bf16 linear weight (SmolLM2: 269 MB with its tied lm_head), and a repack after every weight
load (SmolLM2: 61-86 ms on a 2-core AMD EPYC, with the memory of the copies it replaces kept for it by malloc:
engines/freed_memory.py; 140-165 ms without).
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from mgrpo_actors.engines.freed_memory import keep_freed_memory

__all__ = ["PackedLinears", "pack_linears", "packing_available"]


def packing_available(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether this torch build and CPU can pack `dtype` linear weights on `device` (bf16 on a CPU whose
    oneDNN has bf16 kernels)."""
    mkldnn = torch.ops.mkldnn
    return (
        dtype == torch.bfloat16
        and device.type == "cpu"
        and torch.backends.mkldnn.is_available()
        and hasattr(mkldnn, "_reorder_linear_weight")
        and hasattr(mkldnn, "_linear_pointwise")
        and bool(mkldnn._is_mkldnn_bf16_supported())
    )


class PackedLinears:
    """The packed weights of a model's bf16 CPU linear layers, each rebuilt when its weight changes."""

    def __init__(self) -> None:
        # id(layer) -> (the weight packed: an alias that keeps its storage alive, its version then, the packed copy)
        self._packed: dict[int, tuple[torch.Tensor, int, torch.Tensor]] = {}
        self._layers: list[torch.nn.Linear] = []

    @property
    def layers(self) -> int:
        """How many layers run on packed weights."""
        return len(self._layers)

    def add(self, layer: torch.nn.Linear) -> None:
        """Route `layer`'s forward through its packed weight, packed now."""

        def forward(self: torch.nn.Linear, x: torch.Tensor, _packed: PackedLinears = self) -> torch.Tensor:
            return _packed.forward(self, x)

        layer.forward = types.MethodType(forward, layer)
        self._layers.append(layer)
        self.packed(layer)

    def repack(self) -> None:
        """Pack every layer's weight again (after the engine wrote new weights in whatever way)."""
        self._packed.clear()
        for layer in self._layers:
            self.packed(layer)

    def packed(self, layer: torch.nn.Linear) -> torch.Tensor:
        """The layer's packed weight, rebuilt if the weight moved on since it was packed: written in place (its
        version counter) or replaced by another tensor (`.data =`; the alias kept holds the old storage, so the
        new one cannot sit at its address)."""
        weight = layer.weight
        entry = self._packed.get(id(layer))
        if entry is None or entry[0].data_ptr() != weight.data_ptr() or entry[1] != weight._version:
            with torch.no_grad():
                source = weight.detach()
                entry = (source, weight._version, torch.ops.mkldnn._reorder_linear_weight(source, None))
            self._packed[id(layer)] = entry
        return entry[2]

    def forward(self, layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """`F.linear(x, layer.weight, layer.bias)`, on the packed weight where that is the same product."""
        weight = layer.weight
        if (
            weight.dtype != torch.bfloat16
            or x.dtype != torch.bfloat16
            or weight.device.type != "cpu"
            or weight.is_inference()  # its in-place writes move no version counter
            or (torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad))  # the packed op has no backward
        ):
            return F.linear(x, weight, layer.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed(layer), layer.bias, "none", [], "")


def pack_linears(model: torch.nn.Module) -> PackedLinears | None:
    """Route every `nn.Linear` of `model` (bf16, CPU) through packed weights; None where packing is not
    available (another dtype or device, a torch without oneDNN's bf16). The weights are packed now, so the
    first call pays nothing extra."""
    parameter = next(model.parameters(), None)
    if parameter is None or not packing_available(parameter.dtype, parameter.device):
        return None
    keep_freed_memory()  # every weight load repacks: its memory reused, not faulted in afresh
    packed = PackedLinears()
    for layer in model.modules():
        weight = getattr(layer, "weight", None)
        if type(layer) is torch.nn.Linear and weight.dtype == torch.bfloat16 and not weight.is_inference():
            packed.add(layer)
    return packed
