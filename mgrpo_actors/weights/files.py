"""A new policy's weights: read them (a state dict as is, or safetensors from a file or a directory, each
tensor read straight into the tensor it replaces) and check that they fit a model before anything is copied
into it."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from mgrpo_actors.engines.base import WeightsSource

__all__ = [
    "SAFETENSORS_DTYPES",
    "StoredTensor",
    "check_fits",
    "check_shapes_fit",
    "read_into",
    "read_weights",
    "safetensors_files",
    "safetensors_header",
    "tied_aliases",
]

SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit


@dataclass(frozen=True)
class StoredTensor:
    """Where one tensor of a safetensors file lies: bytes [start, end) of the file."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int
    end: int


def safetensors_header(path: Path) -> tuple[dict[str, str], dict[str, StoredTensor]]:
    """(metadata, name -> StoredTensor) of a safetensors file; ValueError if its header is not one."""
    with open(path, "rb") as f:
        raw = f.read(8)
        size = struct.unpack("<Q", raw)[0] if len(raw) == 8 else 0
        if not 0 < size <= _MAX_HEADER:
            raise ValueError(f"{str(path)!r} has no safetensors header")
        try:
            header = json.loads(f.read(size))
        except ValueError:
            raise ValueError(f"{str(path)!r}: the safetensors header is not JSON") from None
    metadata = (header.pop("__metadata__", None) or {}) if isinstance(header, dict) else None
    if not isinstance(metadata, dict):
        raise ValueError(f"{str(path)!r}: the safetensors header is not a map with a metadata map")
    tensors = {}
    for name, entry in header.items():
        try:
            dtype, shape = SAFETENSORS_DTYPES[entry["dtype"]], tuple(int(n) for n in entry["shape"])
            begin, end = (int(n) for n in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{str(path)!r}: tensor {name!r} is not described right ({exc})") from None
        if end - begin != torch.Size(shape).numel() * dtype.itemsize or begin < 0:
            raise ValueError(f"{str(path)!r}: tensor {name!r} has {end - begin} bytes for its shape {shape}")
        tensors[name] = StoredTensor(dtype, shape, 8 + size + begin, 8 + size + end)
    return metadata, tensors


def read_into(path: Path, stored: Mapping[str, StoredTensor], targets: Mapping[str, torch.Tensor]) -> None:
    """Read each tensor of `stored` (of the file at `path`) into the tensor of that name in `targets`, in place:
    straight into its storage where dtype and layout allow (one copy, nothing held besides), else through one
    tensor of the file's dtype at a time."""
    with open(path, "rb", buffering=0) as f:
        for name, entry in sorted(stored.items(), key=lambda item: item[1].start):
            target = targets[name].detach()
            direct = target.dtype == entry.dtype and target.device.type == "cpu" and target.is_contiguous()
            into = target if direct else torch.empty(entry.shape, dtype=entry.dtype)
            view = memoryview(into.reshape(-1).view(torch.uint8).numpy())
            f.seek(entry.start)
            done = 0
            while done < len(view):
                n = f.readinto(view[done:])
                if not n:
                    raise ValueError(f"{str(path)!r} ends inside tensor {name!r}")
                done += n
            if direct:  # written through numpy: tell torch the tensor changed, as an in-place op would
                torch.autograd.graph.increment_version(target)
            else:
                target.copy_(into)


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


def check_shapes_fit(
    expected: Mapping[str, tuple[int, ...]],
    incoming: Mapping[str, tuple[int, ...]],
    optional: set[str] = frozenset(),
    partial: bool = False,
) -> None:
    """Raise ValueError unless `incoming` (name -> shape) names exactly `expected`'s tensors (those of `optional`
    may be given or not; `partial`: only some of them), each of the same shape. Nothing is loaded yet."""
    unexpected = sorted(set(incoming) - set(expected) - optional)
    missing = [] if partial else sorted(set(expected) - set(incoming) - optional)
    misshapen = sorted(name for name in set(incoming) & set(expected) if incoming[name] != expected[name])
    if unexpected or missing or misshapen:
        raise ValueError(
            f"weights do not fit the model: unexpected {unexpected[:5]}, missing {missing[:5]}, "
            f"wrong shape {misshapen[:5]}; nothing was loaded"
        )


def check_fits(model: torch.nn.Module, state: Mapping[str, torch.Tensor], partial: bool = False) -> None:
    """Raise ValueError unless `state` names exactly the model's tensors (tied aliases optional; `partial`: only
    some of them), shapes equal."""
    check_shapes_fit(
        {name: tuple(t.shape) for name, t in model.state_dict().items()},
        {name: tuple(t.shape) for name, t in state.items()},
        tied_aliases(model),
        partial,
    )
