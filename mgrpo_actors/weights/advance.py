"""The write side of a delta (docs/architecture.md §Weights: full snapshots and deltas): the learner's copy of
the wire weights (what the engines hold once they loaded the version written last) brought to the new policy
version in place, finding what changed as it goes.

Per tensor one pass: the new weights are cast to the wire dtype a cache-sized chunk at a time and compared with
the held ones by their bits (weights/kernels.py), so no second copy of the model is made, and no memory is
faulted in afresh every version. (Where the compiled cast does not apply, another source dtype or device, or a
tensor holding a NaN, torch casts that tensor whole once, and the comparison runs on its copy.) The compiled
loops let go of the GIL, so the tensors are shared out between the calling thread and one more. Measured on
SmolLM2-135M's 134.5 M elements, fp32 to bf16 with 4.8 % changed (2-core AMD EPYC): torch's cast and numpy's
compare 414-455 ms; cast and compare compiled, one thread 155-167 ms, two 111-117 ms.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mgrpo_actors.weights.delta import SparseChange, bits_of, whole_at
from mgrpo_actors.weights.kernels import cast_to_bf16, changed_elements, room_for_changes
from mgrpo_actors.weights.two_threads import share_out

__all__ = ["advance", "advance_all", "compiled_cast_matches_torch"]

_CHUNK = 1 << 18  # elements cast and compared at a time: the cast chunk stays in cache

_cast_checked: bool | None = None


def compiled_cast_matches_torch() -> bool:
    """Whether the compiled fp32 -> bf16 cast gives torch's bits on this machine, checked once per process on
    every kind of value but NaN (normal, subnormal, zero of either sign, infinite, rounding up to infinite, ties)
    and random bit patterns. Where it does not (a torch whose cast flushed subnormals, say), torch casts."""
    global _cast_checked
    if _cast_checked is None:
        special = [0, 0x80000000, 1, 0x807FFFFF, 0x00800000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x7F7F8000]
        special += [0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F807FFF, 0x00008000, 0x00018000]
        rng = np.random.default_rng(0)
        bits = np.concatenate([np.array(special, np.uint32), rng.integers(0, 2**32, 1 << 16, dtype=np.uint32)])
        bits = bits[(bits & 0x7FFFFFFF) <= 0x7F800000]  # no NaN: its bits are torch's choice
        ours = np.empty(bits.size, np.uint16)
        cast_to_bf16(bits, ours)
        theirs = torch.from_numpy(bits.view(np.float32)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        _cast_checked = bool(np.array_equal(ours, theirs))
    return _cast_checked


def _compiled(held: torch.Tensor, source: torch.Tensor) -> bool:
    """Whether the compiled loops bring `held` to `source` by themselves (a CPU tensor of held's dtype, or fp32 to
    bf16), so that it may go to the second thread (torch casts there only a tensor holding a NaN)."""
    if source.device.type != "cpu" or not source.is_contiguous():
        return False
    if source.dtype == held.dtype:
        return True
    return source.dtype == torch.float32 and held.dtype == torch.bfloat16 and compiled_cast_matches_torch()


class _WireBits:
    """The wire bits of a source tensor, a range at a time: its own bits (same dtype), the compiled fp32 -> bf16
    cast, or torch's cast of the whole tensor at once, in its own shape: torch gives a NaN other bits by where
    it falls (a 0-d tensor's, a slice's) than a whole tensor's cast, and full snapshots cast whole tensors."""

    def __init__(self, held: torch.Tensor, source: torch.Tensor) -> None:
        self.held, self.source = held, source.detach()
        self.flat: np.ndarray | None = None  # every element's wire bits, where they exist whole
        self.fp32: np.ndarray | None = None  # the source's fp32 bits, for the compiled cast
        if not _compiled(held, self.source):
            self._torch_cast()
        elif self.source.dtype == held.dtype:
            self.flat = bits_of(self.source).reshape(-1).numpy()
        else:
            self.fp32 = self.source.view(torch.int32).reshape(-1).numpy().view(np.uint32)

    def _torch_cast(self) -> None:
        self.flat = bits_of(self.source.to(device="cpu", dtype=self.held.dtype)).reshape(-1).numpy()

    def range(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        """The bits of elements [start, stop): `out` written, or a view of bits that exist already."""
        if self.fp32 is not None:
            if cast_to_bf16(self.fp32[start:stop], out):
                return out
            self.fp32 = None  # a NaN: torch's cast of the whole tensor from here on (it agrees on everything else)
            self._torch_cast()
        assert self.flat is not None
        return self.flat[start:stop]


def advance(held: torch.Tensor, source: torch.Tensor) -> torch.Tensor | SparseChange | None:
    """Make `held` (a contiguous CPU tensor: the wire weights of the version written last) equal to `source`
    cast to its dtype, in place, and say how it changed, as `delta.change_of` would: None (not at all), its
    changed elements, or whole (`held` itself, once indices and values would cost more than the tensor)."""
    if held.shape != source.shape or held.device.type != "cpu" or not held.is_contiguous():
        raise ValueError(f"cannot advance a {tuple(held.shape)} tensor on {held.device} to {tuple(source.shape)}")
    n = held.numel()
    if n >= 2**31:  # past int32 indices: whole, cast by torch in place
        held.copy_(source.detach())
        return held
    old, wire = bits_of(held).reshape(-1).numpy(), _WireBits(held, source)
    limit = whole_at(n, held.element_size())
    indices, values = room_for_changes(limit, old.dtype)
    chunk = np.empty(min(n, _CHUNK), old.dtype)
    count = 0
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        new = wire.range(start, stop, chunk[: stop - start])
        count, compared = changed_elements(new, old[start:stop], start, indices, values, count, limit, True)
        if count and count >= limit:
            rest = old[start + compared :]  # what was not compared yet
            np.copyto(rest, wire.range(start + compared, n, rest))
            return held
    if not count:
        return None
    return SparseChange.found(held.shape, held.dtype, indices, values, count)


def advance_all(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor | SparseChange | None]:
    """`advance(held, source)` for every pair, in order; pairs the compiled loops handle alone are shared out
    between this thread and a second one (weights/two_threads.py)."""
    return share_out(
        len(pairs), lambda i: pairs[i][0].numel(), lambda i: advance(*pairs[i]), lambda i: _compiled(*pairs[i])
    )
