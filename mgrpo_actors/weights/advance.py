"""The write side of a delta (docs/architecture.md §Weights: full snapshots and deltas): the learner's copy of
the wire weights (what the engines hold once they loaded the version written last) brought to the new policy
version in place, finding what changed as it goes.

Per tensor one pass: the new weights are cast to the wire dtype a cache-sized chunk at a time and compared with
the held ones by their bits (weights/kernels.py), so no second copy of the model is made, and no memory is
faulted in afresh every version. The compiled loops let go of the GIL, so the tensors are shared out between the
calling thread and one more. Measured on SmolLM2-135M's 134.5 M elements, fp32 to bf16 with 4.8 % changed
(2-core AMD EPYC): torch's cast and numpy's compare 414-455 ms; cast and compare compiled, one thread 155-167
ms, two 111-117 ms.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from mgrpo_actors.weights.delta import SparseChange, bits_of, whole_at
from mgrpo_actors.weights.kernels import cast_to_bf16, changed_elements

__all__ = ["advance", "advance_all", "compiled_cast_matches_torch"]

_CHUNK = 1 << 18  # elements cast and compared at a time: the cast chunk stays in cache
_SHARE_FROM = 1 << 16  # tensors of fewer elements stay on the calling thread (a hand-over costs more)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_cast_checked: bool | None = None


def _second_thread() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(1, thread_name_prefix="mgrpo-weights")
        return _pool


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
    """Whether the compiled loops alone bring `held` to `source` (no torch op: safe on the second thread)."""
    if source.device.type != "cpu" or not source.is_contiguous():
        return False
    if source.dtype == held.dtype:
        return True
    return source.dtype == torch.float32 and held.dtype == torch.bfloat16 and compiled_cast_matches_torch()


def _cast(out: np.ndarray, held: torch.Tensor, source: torch.Tensor, start: int, stop: int) -> np.ndarray:
    """The wire bits of `source`'s flat elements [start, stop) written into `out` (held's dtype's bits)."""
    part = source.detach().reshape(-1)[start:stop]
    if part.device.type == "cpu" and part.dtype == held.dtype:
        np.copyto(out, bits_of(part).numpy())
        return out
    if (
        part.device.type == "cpu"
        and part.dtype == torch.float32
        and held.dtype == torch.bfloat16
        and compiled_cast_matches_torch()
        and cast_to_bf16(part.view(torch.int32).numpy().view(np.uint32), out)
    ):
        return out
    # torch casts: other dtypes and devices, and a part holding a NaN, cast in the tensor's own shape when it is
    # the whole tensor (torch gives a 0-d NaN other bits than a 1-d one, and full snapshots cast whole tensors)
    target = torch.from_numpy(out).view(held.dtype)
    if stop - start == source.numel():
        target.view(source.shape).copy_(source.detach())
    else:
        target.copy_(part)
    return out


def advance(held: torch.Tensor, source: torch.Tensor) -> torch.Tensor | SparseChange | None:
    """Make `held` (a contiguous CPU tensor: the wire weights of the version written last) equal to `source`
    cast to its dtype, in place, and say how it changed, as `delta.change_of` would: None (not at all), its
    changed elements, or whole (`held` itself, once indices and values would cost more than the tensor)."""
    if held.shape != source.shape or held.device.type != "cpu" or not held.is_contiguous():
        raise ValueError(f"cannot advance a {tuple(held.shape)} tensor on {held.device} to {tuple(source.shape)}")
    n = held.numel()
    old = bits_of(held).reshape(-1).numpy()
    if n >= 2**31:  # past int32 indices: whole
        _cast(old, held, source, 0, n)
        return held
    limit = whole_at(n, held.element_size())
    indices, values = np.empty(limit + 8, np.int32), np.empty(limit + 8, old.dtype)  # lanes written past the count
    same = source.device.type == "cpu" and source.dtype == held.dtype and source.is_contiguous()
    flat = bits_of(source.detach()).reshape(-1).numpy() if same else None
    chunk = None if same else np.empty(min(n, _CHUNK), old.dtype)
    count = 0
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        new = flat[start:stop] if flat is not None else _cast(chunk[: stop - start], held, source, start, stop)
        count, compared = changed_elements(new, old[start:stop], start, indices, values, count, limit, True)
        if count and count >= limit:
            _cast(old[start + compared :], held, source, start + compared, n)  # what was not compared yet
            return held
    if not count:
        return None
    values_tensor = torch.from_numpy(values[:count].copy()).view(held.dtype)
    return SparseChange(tuple(held.shape), torch.from_numpy(indices[:count].copy()), values_tensor)


def advance_all(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor | SparseChange | None]:
    """`advance(held, source)` for every pair, in order; pairs the compiled loops handle alone are shared out
    between this thread and a second one (the larger first, each to the side with fewer elements so far)."""
    shared = sorted(
        (i for i, (held, source) in enumerate(pairs) if held.numel() >= _SHARE_FROM and _compiled(held, source)),
        key=lambda i: -pairs[i][0].numel(),
    )
    mine, theirs, mine_n, theirs_n = [], [], 0, 0
    for i in shared:
        if theirs_n < mine_n:
            theirs.append(i)
            theirs_n += pairs[i][0].numel()
        else:
            mine.append(i)
            mine_n += pairs[i][0].numel()
    taken = set(mine) | set(theirs)
    mine += [i for i in range(len(pairs)) if i not in taken]
    results: dict[int, torch.Tensor | SparseChange | None] = {}
    future: Future | None = None
    if theirs:
        future = _second_thread().submit(lambda: {i: advance(*pairs[i]) for i in theirs})
    try:
        for i in mine:
            results[i] = advance(*pairs[i])
    finally:
        if future is not None:  # never leave it writing into the held weights after this returns
            results.update(future.result())
    return [results[i] for i in range(len(pairs))]
