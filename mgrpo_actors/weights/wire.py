"""The file of one policy version (docs/architecture.md §Weights: full snapshots and
deltas): a safetensors file, written and read tensor by tensor.

A full snapshot holds every tensor of the model (tied aliases left out) under its own name, so any
safetensors reader (transformers, vLLM, an engine's `load_weights`) loads it. A delta holds what changed
since its base version: a tensor under its own name is replaced whole; a tensor changed element by element
has its new values in `<name>@values` (the wire dtype) at flat indices in increasing order, which travel as
`<name>@counts` (int32: how many fall in each block of 65,536 elements) and `<name>@offsets` (uint16 bits:
each one's offset in its block): 2 bytes an index instead of 4; a tensor it does not name is unchanged. The
header's metadata says which:

    mgrpo.kind         "full" or "delta"
    mgrpo.version      this version
    mgrpo.base         (delta) the version it changes: always the one before
    mgrpo.base_sha256  (delta) sha256 of the base version's file. A delta names exactly one base, and as
                       every file names its base's digest, a file's digest stands for its whole chain
    mgrpo.shapes       (delta) JSON {name: shape} of the tensors changed element by element

`write_version` writes the header, then each tensor's bytes straight from its storage (safetensors'
own save_file first makes a bytes copy of every tensor), hashing them on a second thread as they go out.
`read_delta` decodes its changes' indices on two threads.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Iterable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open

from mgrpo_actors.runtime.disk import disk_full, no_space_left
from mgrpo_actors.weights.delta import SparseChange, WeightsDelta
from mgrpo_actors.weights.files import SAFETENSORS_DTYPES, safetensors_header
from mgrpo_actors.weights.two_threads import SHARE_CHANGES_FROM, second_thread, share_out

__all__ = ["VersionHeader", "delta_entries", "read_delta", "read_header", "write_version"]

_DTYPES = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
_COUNTS, _OFFSETS, _VALUES = "@counts", "@offsets", "@values"
_BLOCK_BITS = 16  # blocks of 65,536 elements: an offset in one is a uint16
_SHA256 = re.compile(r"[0-9a-f]{64}")
_HASH_APART_FROM = 4 << 20  # files of at least this many bytes are hashed on the second thread while written


def _bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes without a copy (a contiguous CPU tensor's storage), little-endian as stored."""
    flat = tensor.detach().reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    return memoryview(flat.contiguous().view(torch.uint8).numpy())


def delta_entries(name: str, change: SparseChange) -> list[tuple[str, torch.Tensor]]:
    """The tensors of a delta file that carry one sparse change."""
    from mgrpo_actors.weights.kernels import block_offsets  # numba's import (~0.3 s) only where used

    blocks = -(-torch.Size(change.shape).numel() >> _BLOCK_BITS)
    counts, offsets = block_offsets(change.indices.numpy(), blocks, _BLOCK_BITS)
    return [
        (f"{name}{_COUNTS}", torch.from_numpy(counts)),
        (f"{name}{_OFFSETS}", torch.from_numpy(offsets.view(np.int16))),
        (f"{name}{_VALUES}", change.values),
    ]


def _indices(shape: tuple[int, ...], counts: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Flat int32 indices from per-block counts and in-block offsets; ValueError if they cannot be a tensor's."""
    from mgrpo_actors.weights.kernels import indices_of_blocks  # numba's import (~0.3 s) only where used

    numel = torch.Size(shape).numel()
    if numel >= 2**31:  # past int32 indices: the learner sends such a tensor whole (advance.py)
        raise ValueError(f"a tensor of {numel} elements cannot change element by element")
    blocks = -(-numel >> _BLOCK_BITS)
    if counts.dtype != torch.int32 or offsets.dtype != torch.int16 or counts.shape != (blocks,) or offsets.dim() != 1:
        raise ValueError(f"{blocks} int32 block counts and int16 offsets expected, got {counts.dtype} {offsets.dtype}")
    indices = indices_of_blocks(counts.numpy(), offsets.numpy().view(np.uint16), _BLOCK_BITS)
    if indices is None:
        raise ValueError("offsets that do not rise within a block")
    return torch.from_numpy(indices)


def write_version(path: Path, tensors: Iterable[tuple[str, torch.Tensor]], metadata: dict[str, str]) -> tuple[str, int]:
    """Write (name, tensor) pairs as a safetensors file with `metadata`; returns (sha256 hex, size in bytes)."""
    entries = [(name, tensor) for name, tensor in tensors]
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for name, tensor in entries:
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # tensor data 8-byte aligned, as safetensors writes it
    digest = hashlib.sha256()
    blocks = [struct.pack("<Q", len(encoded)), encoded, *(_bytes(tensor) for _, tensor in entries)]
    path.parent.mkdir(parents=True, exist_ok=True)
    # hashed on the second thread while this one writes (both let go of the GIL): a SmolLM2 delta's 24 MB hash
    # in ~14 ms, its writing takes about as long; a small file's hand-over would cost more than it saves
    hashed: Future | None = None
    try:
        if 8 + len(encoded) + offset >= _HASH_APART_FROM:
            hashed = second_thread().submit(lambda: [digest.update(block) for block in blocks])
        with open(path, "wb") as f:
            for block in blocks:
                f.write(block)
        if hashed is None:
            for block in blocks:
                digest.update(block)
        else:
            hashed.result()
    except BaseException as exc:  # a part of a version is no version: nothing is left to be mistaken for one
        if hashed is not None and not hashed.cancel():
            wait([hashed])  # never hashing a tensor's memory after this returns
        path.unlink(missing_ok=True)
        if isinstance(exc, OSError) and no_space_left(exc, path):
            raise disk_full(f"weights version {metadata.get('mgrpo.version', '')}".strip(), path) from exc
        raise
    return digest.hexdigest(), 8 + len(encoded) + offset


@dataclass(frozen=True)
class VersionHeader:
    """What a version's file says about itself."""

    kind: str  # "full" or "delta"
    version: int | None  # None: a plain safetensors file (a full snapshot that records no version)
    base: int | None = None  # delta: the version it changes
    base_sha256: str = ""  # delta: the sha256 of that version's file
    shapes: dict[str, tuple[int, ...]] | None = None  # delta: shapes of the tensors changed element by element


def _malformed(path: Path, why: str) -> ValueError:
    return ValueError(f"weights file {str(path)!r} is not a policy version: {why}")


def read_header(path: Path) -> VersionHeader:
    """The version header of the file at `path`; ValueError if it is not one (a plain safetensors file is a full
    snapshot of no recorded version)."""
    try:
        meta, _ = safetensors_header(path)
    except ValueError as exc:
        raise _malformed(path, str(exc)) from None
    kind = meta.get("mgrpo.kind", "full")
    if kind not in ("full", "delta"):
        raise _malformed(path, f"kind {kind!r}")
    try:
        if kind == "full":
            return VersionHeader("full", int(meta["mgrpo.version"]) if "mgrpo.version" in meta else None)
        version = int(meta["mgrpo.version"])
        base, base_sha = int(meta["mgrpo.base"]), meta["mgrpo.base_sha256"]
        shapes = {name: tuple(int(n) for n in shape) for name, shape in json.loads(meta["mgrpo.shapes"]).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _malformed(path, f"bad metadata ({type(exc).__name__}: {exc})") from None
    if not 1 <= base < version or not isinstance(base_sha, str) or not _SHA256.fullmatch(base_sha):
        raise _malformed(path, f"delta {version} names base {base} ({str(base_sha)[:16]!r})")
    return VersionHeader("delta", version, base, base_sha, shapes)


def read_delta(path: Path, header: VersionHeader) -> WeightsDelta:
    """The delta in the file at `path` (its header read before); ValueError if its tensors do not add up. The
    sparse changes' indices are decoded on two threads (weights/two_threads.py)."""
    assert header.kind == "delta" and header.base is not None and header.shapes is not None
    whole: dict[str, torch.Tensor] = {}
    parts: dict[str, dict[str, torch.Tensor]] = {}
    try:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                name, at, part = key.partition("@")
                if not at:
                    whole[name] = f.get_tensor(key)
                elif f"@{part}" in (_COUNTS, _OFFSETS, _VALUES) and name in header.shapes:
                    parts.setdefault(name, {})[f"@{part}"] = f.get_tensor(key)
                else:
                    raise _malformed(path, f"unexpected tensor {key!r}")
    except SafetensorError as exc:  # cut short, entries overlapping: what safetensors refuses to read
        raise _malformed(path, str(exc)) from None
    names = list(header.shapes)
    for name in names:
        got = parts.get(name, {})
        if len(got) != 3 or name in whole:
            raise _malformed(path, f"{name!r} needs exactly {name}{_COUNTS}, {name}{_OFFSETS} and {name}{_VALUES}")

    def change(i: int) -> SparseChange:
        name, got = names[i], parts[names[i]]
        shape = header.shapes[name]
        try:
            indices = _indices(shape, got[_COUNTS], got[_OFFSETS])  # None unless they rise: checked there
            return SparseChange(shape, indices, got[_VALUES], rising=True)
        except ValueError as exc:
            raise _malformed(path, f"{name!r}: {exc}") from None

    changes = share_out(len(names), lambda i: parts[names[i]][_OFFSETS].numel(), change, share_from=SHARE_CHANGES_FROM)
    return WeightsDelta(header.version, header.base, header.base_sha256, whole, dict(zip(names, changes, strict=True)))
