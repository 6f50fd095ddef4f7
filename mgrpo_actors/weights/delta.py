"""What changed between two policy versions, exactly (docs/architecture.md §Weights: full snapshots and
deltas): per tensor nothing, its changed elements (flat indices and their new values) or the
whole tensor, whichever is smallest on the wire. Elements compare by their bits, so a delta rebuilds the
learner's wire weights bit for bit (-0.0 is not 0.0, a NaN is itself).

The wire dtype is bf16 where the side's engine runs bf16, else the learner's own: bf16 holds about 3
significant digits, so an AdamW step at a small learning rate leaves most bf16 weights as they were,
while in fp32 every weight that had a gradient moves (`mgrpo bench weights` measures both).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mgrpo_actors.weights.two_threads import SHARE_CHANGES_FROM, share_out

__all__ = [
    "SparseChange",
    "WeightsDelta",
    "bits_of",
    "apply_delta",
    "change_of",
    "check_delta_fits",
    "set_all_elements",
    "set_elements",
    "whole_at",
    "wire_dtype",
]

_INDEX_BYTES = 2  # what an index costs in a delta file (wire.py); in memory int32, so tensors of < 2**31 elements
_SPARSE_EXTRA = 200  # bytes a sparse change adds to a file's header (two entries more than a whole tensor), about


def wire_dtype(engine_dtype: str, learner_dtype: str) -> torch.dtype:
    """The dtype a side's weights travel in: bf16 when its engine runs bf16 (what the engine would round them
    to anyway), else the learner's (the engine casts, element by element)."""
    return torch.bfloat16 if engine_dtype == "bfloat16" else getattr(torch, learner_dtype)


def bits_of(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` viewed as integers of its element size: equal bits, equal values."""
    kind = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.view(kind)


@dataclass(frozen=True)
class SparseChange:
    """Some elements of one tensor set: `values` at the flat positions `indices` of a tensor of `shape`."""

    shape: tuple[int, ...]
    indices: torch.Tensor  # int32, 1-D, strictly increasing
    values: torch.Tensor  # 1-D, as many as indices
    # the indices rise by how they were made (a compare's, a delta file's blocks decoded): their check, a pass over
    # them (~6 ms for a SmolLM2 delta), is left out; their bounds are checked whatever. Set only by such a maker
    # (dataclasses.replace with other indices would keep it)
    rising: bool = field(default=False, compare=False, repr=False)

    @classmethod
    def found(
        cls, shape: torch.Size, dtype: torch.dtype, indices: np.ndarray, values: np.ndarray, count: int
    ) -> SparseChange:
        """The first `count` entries of a compare's buffers (kernels.changed_elements), copied out of them."""
        found_values = torch.from_numpy(values[:count].copy()).view(dtype)
        return cls(tuple(shape), torch.from_numpy(indices[:count].copy()), found_values, rising=True)

    def __post_init__(self) -> None:
        n, numel = self.indices.numel(), torch.Size(self.shape).numel()
        if self.indices.dtype != torch.int32 or self.indices.dim() != 1 or self.values.dim() != 1:
            raise ValueError(f"a sparse change needs 1-D int32 indices and 1-D values, got {self.indices.dtype}")
        if self.values.numel() != n:
            raise ValueError(f"a sparse change of {n} indices has {self.values.numel()} values")
        from mgrpo_actors.weights.kernels import strictly_increasing  # numba's import (~0.3 s) only where used

        indices = self.indices.numpy()
        if n and (int(indices[0]) < 0 or int(indices[-1]) >= numel):
            raise ValueError(f"a sparse change's indices leave a tensor of {numel} elements")
        if n > 1 and not self.rising and not strictly_increasing(indices):
            raise ValueError("a sparse change's indices are not strictly increasing")


@dataclass(frozen=True)
class WeightsDelta:
    """Policy version `version` as changes to version `base` (whose file has sha256 `base_sha256`): `whole`
    tensors replaced, `sparse` ones' elements set, every other tensor as it was."""

    version: int
    base: int
    base_sha256: str
    whole: dict[str, torch.Tensor]
    sparse: dict[str, SparseChange]

    def shapes(self) -> dict[str, torch.Size]:
        """Name -> shape of every tensor this delta changes."""
        return {
            **{name: t.shape for name, t in self.whole.items()},
            **{name: torch.Size(c.shape) for name, c in self.sparse.items()},
        }


def whole_at(numel: int, size: int) -> int:
    """From this many changed elements on, a tensor of `numel` elements of `size` bytes costs less whole on the
    wire than as indices and values (the two more header entries counted)."""
    return max(0, numel * size - _SPARSE_EXTRA - 4 * -(-numel >> 16)) // (_INDEX_BYTES + size)


def change_of(old: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor | SparseChange | None:
    """How `new` differs from `old` (same dtype) at the least cost on the wire: None (not at all), its changed
    elements, or `new` itself (when indices and values would take more bytes than the tensor). The learner's
    encoder finds the same while casting (weights/advance.py)."""
    from mgrpo_actors.weights.kernels import changed_elements, room_for_changes  # numba's import only where used

    if old is None or old.shape != new.shape or old.dtype != new.dtype or new.numel() >= 2**31:
        return new
    a, b = bits_of(old).reshape(-1).numpy(), bits_of(new).reshape(-1).numpy()
    limit = whole_at(new.numel(), new.element_size())
    indices, values = room_for_changes(limit, b.dtype)
    count, _ = changed_elements(b, a, 0, indices, values, 0, limit, update=False)
    if count and count >= limit:
        return new
    if not count:
        return None
    return SparseChange.found(new.shape, new.dtype, indices, values, count)


def _compiled_write(target: torch.Tensor, change: SparseChange) -> bool:
    """Whether the compiled loop writes `change` into `target` (a contiguous CPU tensor of the values' dtype)."""
    return target.device.type == "cpu" and target.is_contiguous() and change.values.dtype == target.dtype


def _scatter(target: torch.Tensor, change: SparseChange) -> None:
    from mgrpo_actors.weights.kernels import scatter_elements  # numba's import (~0.3 s) only where used

    scatter_elements(bits_of(target).reshape(-1).numpy(), change.indices.numpy(), bits_of(change.values).numpy())


def set_elements(target: torch.Tensor, change: SparseChange) -> None:
    """Write a sparse change into `target` in place (cast to its dtype)."""
    set_all_elements([(target, change)])


def set_all_elements(changes: Sequence[tuple[torch.Tensor, SparseChange]]) -> None:
    """Write each sparse change into its target in place (cast to its dtype); the compiled writes shared out between
    this thread and a second one (weights/two_threads.py: a SmolLM2 delta's 6 M elements took 21-23 ms on one)."""
    targets = [target.detach() for target, _ in changes]
    compiled = [_compiled_write(target, change) for target, (_, change) in zip(targets, changes, strict=True)]

    def write(i: int) -> None:
        target, change = targets[i], changes[i][1]
        if compiled[i]:
            _scatter(target, change)
            return
        index = change.indices.to(device=target.device, dtype=torch.long)
        values = change.values.to(device=target.device, dtype=target.dtype)
        if target.is_contiguous():
            target.view(-1)[index] = values
        else:
            flat = target.reshape(-1).clone()
            flat[index] = values
            target.copy_(flat.view(target.shape))

    try:
        share_out(
            len(changes), lambda i: changes[i][1].indices.numel(), write, compiled.__getitem__, SHARE_CHANGES_FROM
        )
    finally:  # written outside torch: moved as an in-place op would (a packed copy then knows to repack, engines/)
        for target, outside_torch in zip(targets, compiled, strict=True):
            if outside_torch:
                torch.autograd.graph.increment_version(target)


def check_delta_fits(shapes: Mapping[str, torch.Size], delta: WeightsDelta) -> None:
    """ValueError unless every tensor `delta` changes is one of `shapes` (name -> shape), with its shape."""
    unexpected = sorted(set(delta.shapes()) - set(shapes))
    misshapen = sorted(n for n, s in delta.shapes().items() if n in shapes and torch.Size(shapes[n]) != s)
    if unexpected or misshapen:
        raise ValueError(
            f"delta {delta.version} does not fit: unexpected {unexpected[:5]}, wrong shape {misshapen[:5]}"
        )


def apply_delta(state: MutableMapping[str, torch.Tensor], delta: WeightsDelta) -> None:
    """Make `state` (name -> tensor, version `delta.base`) version `delta.version`: whole tensors replace
    their entries, sparse changes are written into them in place. Checked before anything changes."""
    check_delta_fits({name: t.shape for name, t in state.items()}, delta)
    for name, tensor in delta.whole.items():
        state[name] = tensor
    set_all_elements([(state[name], change) for name, change in delta.sparse.items()])
