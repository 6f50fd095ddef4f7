"""A new policy's weights: read them (a state dict as is, or safetensors from a file or a directory) and
check that they fit a model before anything is copied into it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file

from mgrpo_actors.engines.base import WeightsSource

__all__ = ["check_fits", "read_weights", "safetensors_files", "tied_aliases"]


def safetensors_files(source: str | Path) -> list[Path]:
    """The safetensors file `source` names, or every `*.safetensors` in the directory it names."""
    path = Path(source)
    if path.is_file():
        return [path]
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    if not files:
        raise FileNotFoundError(
            f"no safetensors weights at {str(path)!r} (expected a .safetensors file or a directory of them)"
        )
    return files


def read_weights(source: WeightsSource) -> dict[str, torch.Tensor]:
    """Parameter name -> tensor (on CPU when read from disk)."""
    if isinstance(source, Mapping):
        return dict(source)
    tensors: dict[str, torch.Tensor] = {}
    for file in safetensors_files(source):
        tensors.update(load_file(file))
    return tensors


def tied_aliases(model: torch.nn.Module) -> set[str]:
    """Parameter names that share another parameter's tensor (a tied lm_head): checkpoints may omit them."""
    every_name = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    return every_name - {name for name, _ in model.named_parameters()}


def check_fits(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Raise ValueError unless `state` names exactly the model's tensors (tied aliases optional), shapes equal."""
    expected = model.state_dict()
    unexpected = sorted(set(state) - set(expected))
    missing = sorted(set(expected) - set(state) - tied_aliases(model))
    misshapen = sorted(name for name in set(state) & set(expected) if state[name].shape != expected[name].shape)
    if unexpected or missing or misshapen:
        raise ValueError(
            f"weights do not fit the model: unexpected {unexpected[:5]}, missing {missing[:5]}, "
            f"wrong shape {misshapen[:5]}"
        )
