"""New weights for the vllm engine, checked before anything is copied into the running model.

vLLM's `load_weights` copies tensor by tensor and only raises at a name it does not know, so a bad
file would half-load; and a file missing tensors would leave some old weights under the new version.
The engine therefore checks every new version first, from headers alone, against the checkpoint
the engine started from (the model directory: exactly the names and shapes vLLM loaded): a file
names every tensor (a tied lm_head may be left out, or given), a state dict some or all of them
(weights/sync.py hands an engine without deltas the changed tensors), no other name, the same
shapes. A state dict is written to a temporary safetensors file, so only paths cross into vLLM's
processes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from mgrpo_actors.weights.files import safetensors_files, safetensors_header

__all__ = ["checkpoint_shapes", "file_shapes", "tied_names", "write_state"]

Shapes = dict[str, tuple[int, ...]]


def file_shapes(files: Iterable[str | os.PathLike[str]]) -> Shapes:
    """Tensor name -> shape of safetensors files, read from their headers (no tensor is loaded)."""
    return {name: t.shape for file in files for name, t in safetensors_header(Path(file))[1].items()}


def checkpoint_shapes(model_dir: Path) -> Shapes:
    """Name -> shape of the checkpoint in a model directory: its safetensors headers, or a torch checkpoint's
    tensors mapped without reading them."""
    if any(model_dir.glob("*.safetensors")):
        return file_shapes(safetensors_files(model_dir))
    shapes: Shapes = {}
    for file in sorted(model_dir.glob("pytorch_model*.bin")):
        state = torch.load(file, map_location="meta", weights_only=True, mmap=True)
        shapes.update({name: tuple(tensor.shape) for name, tensor in state.items()})
    if not shapes:
        raise FileNotFoundError(f"no checkpoint (safetensors or pytorch_model*.bin) in {str(model_dir)!r}")
    return shapes


def tied_names(model_dir: Path) -> set[str]:
    """Names a checkpoint of this model may leave out: lm_head.weight when the output layer is tied to the
    input embedding (config.json's tie_word_embeddings)."""
    config_file = model_dir / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    text = config.get("text_config") or {}
    tied = config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    return {"lm_head.weight"} if tied else set()


def write_state(state: Mapping[str, torch.Tensor], path: Path) -> Path:
    """A state dict as one safetensors file (each tensor copied to CPU on its own, so tied tensors share nothing)."""
    save_file({name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in state.items()}, str(path))
    return path
