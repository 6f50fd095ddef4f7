"""The vllm engine's worker extension (`LLM(worker_extension_cls=...)`, by import path: never pickled): mixed into
vLLM's worker class, so `collective_rpc("mgrpo_load_weights", args=(files, complete))` calls it by name in every
worker. Paths and a flag are all that cross the process boundary, with or without
VLLM_ALLOW_INSECURE_SERIALIZATION, and whether or not vLLM runs its engine core in a process of its own
(`LLM.apply_model` reaches `llm_engine.model_executor`, which vLLM 0.10.2's V1 engine only has without
multiprocessing, its default). Imports nothing of vLLM.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

__all__ = ["WeightsWorkerExtension"]


def _reloads_from_iterator(worker: Any) -> bool:
    """Whether the worker's `reload_weights` takes weights (vLLM 0.32: `weights_iterator=`); 0.10.2's takes
    nothing and rereads the model's own files."""
    reload = getattr(getattr(worker, "model_runner", None), "reload_weights", None)
    if reload is None or not hasattr(worker, "reload_weights"):
        return False
    return "weights_iterator" in inspect.signature(reload).parameters


def _repacked(model: torch.nn.Module) -> bool:
    """Whether vLLM turned the loaded weights into something else after loading: its CPU build packs every
    linear layer's weight for oneDNN (`cpu_linear`) and drops the parameter."""
    return any(hasattr(module, "cpu_linear") for module in model.modules()) or any(
        parameter.numel() == 0 for parameter in model.parameters()
    )


class WeightsWorkerExtension:
    """Methods of every vLLM worker (`self` is vLLM's worker)."""

    def mgrpo_load_weights(self, files: list[str], complete: bool) -> int:
        """Load checkpoint-format (HF-named) safetensors files into the running model in place; the number of
        tensors read. `complete`: they name every tensor of the model (else some of them).

        Where the weights are as loaded (vLLM on CUDA), through the model's `load_weights`, as vLLM loaded
        the checkpoint: a fused parameter (qkv, gate_up) takes the parts named and keeps the others; a
        complete load must have set every parameter. Where vLLM repacked them (its CPU build), through the
        worker's layer-by-layer `reload_weights` (vLLM >= 0.32), which runs each layer's processing again,
        but builds a layer from the tensors given alone: it is given the whole checkpoint every time (the
        one vLLM started from, with every version since merged in, kept here on the host), and a layer
        that shares its weight with another (a tied lm_head) is packed again from it afterwards."""
        from safetensors.torch import load_file

        incoming: dict[str, torch.Tensor] = {}
        for file in files:
            incoming.update(load_file(file))
        worker: Any = self
        model = worker.model_runner.get_model()
        if not _repacked(model):
            loaded = set(model.load_weights(weights=iter(incoming.items())))
            unset = sorted({name for name, _ in model.named_parameters()} - loaded) if complete else []
            if unset:
                raise RuntimeError(f"new weights left {len(unset)} parameters of the running model unset: {unset[:5]}")
            return len(incoming)
        if not _reloads_from_iterator(worker):
            raise RuntimeError(
                "this vLLM repacks weights after loading and cannot reload them in place (needs >= 0.32)"
            )
        state = getattr(worker, "_mgrpo_state", None)
        if state is None:
            from mgrpo_actors.weights.files import read_weights

            state = read_weights(worker.vllm_config.model_config.model)
        state.update(incoming)
        worker._mgrpo_state = state
        worker.reload_weights(weights_iterator=iter(state.items()))
        with torch.no_grad():
            for module in model.modules():
                weight = getattr(module, "weight", None)
                method = getattr(module, "quant_method", None)
                if hasattr(module, "cpu_linear") and method is not None and weight is not None and weight.numel():
                    method.process_weights_after_loading(module)  # packs the weight it kept (embedding, lm_head)
        return len(incoming)
