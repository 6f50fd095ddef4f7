"""`RowCache`: the key/value cache of a batch of rows, kept across an engine's calls, so a multi-turn
episode's next turn costs its new tokens instead of its whole history again.

Layout: per layer one preallocated key and one value tensor [rows, kv heads, capacity, head dim]. Every
forward writes the same columns of every row (a shared write pointer: the block of new tokens, or one
sampled token per row), so a row that has fewer new tokens than the block, or has already stopped,
leaves *holes*: columns marked invalid in `valid` [rows, capacity]. Attention masks the holes out
(attention.py) and each row's rotary positions count only its valid columns, so a row with holes
computes exactly what it would without them. `tokens[r]` lists the ids whose keys and values row r
holds, in order; `select` starts the next call from the longest cached prefix of each new prompt,
gathering those columns to the right edge of a fresh cache (one copy per call, no holes carried over).
`gathered` does the same from rows of several caches: decode.py's narrowed batches, merged back into one.

A prefix that the gathered rows share (a system prompt and its worked example) is held once, not in every row
(shared_prefix.py, on a CPU): `shared` holds its keys and values, `holds[r]` says whether row r starts with it, and
such a row's columns hold only its tokens after the prefix (`tokens[r]` still lists them all; its positions count
the prefix). Attention covers both (attention.py). A cache gathered from rows that hold a prefix keeps it (the
longest such prefix that all its rows start with) while the rows times its length reach half MIN_SHARED_READS;
otherwise rows whose common prefix times their number reaches MIN_SHARED_READS get a new one; fewer rows hold copies.

The object is what transformers' decoder layers call `update(key, value, layer_idx)` on (the models
this engine supports: engines/hf.py); it stores nothing about the model beyond the shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mgrpo_actors.engines.shared_prefix import MIN_SHARED_READS, PrefixView, SharedPrefix

__all__ = ["CacheShape", "RowCache", "cache_shape", "common_prefix", "gathered", "longest_prefix"]


@dataclass(frozen=True)
class CacheShape:
    """What the cache needs of the model: layers, key/value heads, head size, dtype and device."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device


def cache_shape(model: torch.nn.Module) -> CacheShape:
    """The CacheShape of a transformers decoder (its config's layers, key/value heads and head size; its
    parameters' dtype and device)."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    parameter = next(model.parameters())
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return CacheShape(config.num_hidden_layers, kv_heads, head_dim, parameter.dtype, parameter.device)


def common_prefix(a: Sequence[int] | np.ndarray, b: Sequence[int] | np.ndarray) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n


class RowCache:
    """Keys and values of `rows` rows, up to `capacity` columns each (grown on demand)."""

    def __init__(self, shape: CacheShape, rows: int, capacity: int) -> None:
        self.shape = shape
        self.rows = rows
        self.capacity = max(capacity, 1)
        self.keys = [self._empty(self.capacity) for _ in range(shape.layers)]
        self.values = [self._empty(self.capacity) for _ in range(shape.layers)]
        self.valid = torch.zeros(rows, self.capacity, dtype=torch.bool, device=shape.device)
        self.length = 0  # columns written so far (the write pointer)
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.shared: SharedPrefix | None = None  # a prefix held once for the rows `holds` names (shared_prefix.py)
        self.holds = [False] * rows

    def own_start(self, row: int) -> int:
        """How many of row `row`'s first tokens the shared prefix holds (its own columns hold the rest)."""
        return self.shared.length if self.shared is not None and self.holds[row] else 0

    def own_columns(self, row: int) -> torch.Tensor:
        """The columns that hold row `row`'s tokens after its shared prefix (all of them without one), in order."""
        return torch.nonzero(self.valid[row, : self.length]).squeeze(-1)

    def prefix_view(self) -> PrefixView | None:
        """What a forward's attention reads of the shared prefix (None: no row holds one)."""
        if self.shared is None or not any(self.holds):
            return None
        if all(self.holds):
            return PrefixView(self.shared, None)
        rows = torch.tensor([r for r, on in enumerate(self.holds) if on], dtype=torch.long, device=self.valid.device)
        return PrefixView(self.shared, rows)

    def _empty(self, capacity: int) -> torch.Tensor:
        s = self.shape
        # Zeros, not empty memory: a hole's keys and values are read (with weight exactly 0) and must be finite.
        return torch.zeros(self.rows, s.kv_heads, capacity, s.head_dim, dtype=s.dtype, device=s.device)

    def reserve(self, columns: int) -> None:
        """Room for `columns` more columns (a copy of what is cached when the capacity doubles)."""
        needed = self.length + columns
        if needed <= self.capacity:
            return
        capacity = max(needed, 2 * self.capacity)
        for store in (self.keys, self.values):
            for layer, old in enumerate(store):
                new = self._empty(capacity)
                new[:, :, : self.length] = old[:, :, : self.length]
                store[layer] = new
        valid = torch.zeros(self.rows, capacity, dtype=torch.bool, device=self.shape.device)
        valid[:, : self.length] = self.valid[:, : self.length]
        self.valid, self.capacity = valid, capacity

    # ---- what transformers' attention layers call ------------------------------------------------
    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: object, **kwargs: object):
        """Store the new columns' keys and values of one layer; the layer's whole used cache comes back."""
        start, width = self.length, key.shape[2]
        self.keys[layer_idx][:, :, start : start + width] = key
        self.values[layer_idx][:, :, start : start + width] = value
        return self.keys[layer_idx][:, :, : start + width], self.values[layer_idx][:, :, : start + width]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    # ---- bookkeeping of a forward -------------------------------------------------------------
    def positions(self, block_valid: torch.Tensor) -> torch.Tensor:
        """Rotary positions [rows, width] of a block of new columns: each row counts its valid columns only, after
        the shared prefix if it holds one (a hole gets position 0: it is masked out everywhere)."""
        before = self.valid[:, : self.length].sum(-1, keepdim=True)
        if self.shared is not None:
            starts = [self.own_start(r) for r in range(self.rows)]
            before = before + torch.tensor(starts, dtype=torch.long, device=before.device)[:, None]
        return torch.where(block_valid, before + block_valid.long().cumsum(-1) - 1, 0)

    def mask(self, block_valid: torch.Tensor) -> torch.Tensor:
        """The attention mask [rows, 1, width, length + width] of a block of new columns: every valid
        earlier column, causally the valid columns of the block, and each query its own column (a hole's
        query needs something to attend to, or its softmax is NaN)."""
        width = block_valid.shape[1]
        earlier = self.valid[:, None, : self.length].expand(self.rows, width, self.length)
        causal = torch.ones(width, width, dtype=torch.bool, device=block_valid.device).tril()
        block = causal[None] & block_valid[:, None, :]
        block = block | torch.eye(width, dtype=torch.bool, device=block_valid.device)[None]
        return torch.cat([earlier, block], dim=-1)[:, None]

    def advance(self, block_ids: torch.Tensor, block_valid: torch.Tensor) -> None:
        """After a forward over `block_ids` [rows, width]: the columns are written, the valid ones counted."""
        width = block_ids.shape[1]
        self.valid[:, self.length : self.length + width] = block_valid
        for row, (ids, ok) in enumerate(zip(block_ids.tolist(), block_valid.tolist(), strict=True)):
            self.tokens[row].extend(i for i, keep in zip(ids, ok, strict=True) if keep)
        self.length += width

    # ---- the next call's cache ----------------------------------------------------------------
    def select(self, sources: Sequence[int | None], keep: Sequence[int], extra: int) -> RowCache:
        """A new cache whose row i holds the first keep[i] cached tokens of old row sources[i] (None:
        nothing), right-aligned, with room for `extra` more columns."""
        picks = [(None if source is None else self, source or 0, n) for source, n in zip(sources, keep, strict=True)]
        return gathered(self.shape, picks, extra)

    def match(self, prompts: Sequence[Sequence[int]]) -> tuple[list[int | None], list[int]]:
        """For each prompt, the cached row with the longest common prefix and how much of it to keep: at
        most all but the prompt's last id (its logits are needed, so it is always fed)."""
        cached = [np.asarray(t, dtype=np.int64) for t in self.tokens]
        matches = [longest_prefix(cached, prompt) for prompt in prompts]
        return [row for row, _ in matches], [n for _, n in matches]


def longest_prefix(cached: Sequence[np.ndarray], prompt: Sequence[int]) -> tuple[int | None, int]:
    """(the index of the cached id sequence sharing the longest prefix with `prompt`, or None; how much of it to keep:
    at most all but the prompt's last id, whose logits are needed, so it is always fed)."""
    ids = np.asarray(prompt, dtype=np.int64)
    best, best_n = None, 0
    for index, tokens in enumerate(cached):
        n = min(common_prefix(tokens, ids), len(ids) - 1)
        if n > best_n:
            best, best_n = index, n
    return best, best_n


def _token_range(cache: RowCache, row: int, first: int, end: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per layer, the keys and values [kv heads, end - first, head dim] of row `row`'s tokens first..end-1, from the
    shared prefix (float32) and the row's own columns, in the cache's dtype."""
    start = cache.own_start(row)
    columns = cache.own_columns(row)[max(first, start) - start : max(end, start) - start]
    parts: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
    for layer in range(cache.shape.layers):
        for store, shared, into in (
            (cache.keys, cache.shared.keys if cache.shared else None, parts[0]),
            (cache.values, cache.shared.values if cache.shared else None, parts[1]),
        ):
            own = store[layer][row].index_select(1, columns)
            if first < start and shared is not None:
                own = torch.cat([shared[layer][:, first : min(end, start)].to(own.dtype), own], dim=1)
            into.append(own)
    return parts


def _prefix_of(
    shape: CacheShape, held: Sequence[tuple[int, RowCache, int, int]], keep_prefix: bool
) -> SharedPrefix | None:
    """The prefix that the gathered rows `held` (index, cache, row, tokens kept) will share, on a CPU: the longest one
    their caches hold that they all start with, while the rows times its length reach half MIN_SHARED_READS (copying
    it back into every row costs too; with `keep_prefix`, whatever the rows), else a new one of all they have in
    common where the rows times its length reach MIN_SHARED_READS, else None (each row holds its own copy)."""
    if not held or shape.device.type != "cpu":
        return None
    _, cache, row, n = held[0]
    first = cache.tokens[row][:n]
    common = n
    for _, other, other_row, other_n in held[1:]:
        common = min(common, common_prefix(first[:common], other.tokens[other_row][:other_n]))
    kept = [c.shared for _, c, r, _ in held if c.holds[r] and c.shared is not None and c.shared.length <= common]
    longest = max(kept, key=lambda prefix: prefix.length, default=None)
    if longest is not None and (keep_prefix or 2 * len(held) * longest.length >= MIN_SHARED_READS):
        return longest
    if len(held) < 2 or len(held) * common < MIN_SHARED_READS:
        return None
    keys, values = _token_range(cache, row, 0, common)
    return SharedPrefix.from_parts(first[:common], keys, values)


def gathered(
    shape: CacheShape, picks: Sequence[tuple[RowCache | None, int, int]], extra: int, keep_prefix: bool = False
) -> RowCache:
    """A new cache whose row i holds the first n valid tokens of row `row` of `cache` for picks[i] = (cache, row, n)
    (cache None or n 0: nothing), right-aligned without holes, with room for `extra` more columns; what the rows share
    held once where enough rows read it (_prefix_of; `keep_prefix`: a prefix the rows hold is kept whatever their
    number, for a cache kept to gather from later rather than to decode on). The rows may come from several caches
    (decode.py's narrowed batches): each cache's rows are gathered in one copy per layer."""
    held = [(i, cache, row, n) for i, (cache, row, n) in enumerate(picks) if cache is not None and n > 0]
    prefix = _prefix_of(shape, held, keep_prefix)
    start = prefix.length if prefix is not None else 0
    width = max((n - start for _, _, _, n in held), default=0)
    fresh = RowCache(shape, len(picks), width + extra)
    fresh.shared = prefix
    for i, cache, row, n in held:
        fresh.tokens[i] = cache.tokens[row][:n]
        fresh.holds[i] = prefix is not None
        fresh.valid[i, width - (n - start) : width] = True
    fresh.length = width
    by_cache: dict[int, tuple[RowCache, list[tuple[int, int, int]]]] = {}
    for i, cache, row, n in held:
        if n == start:
            continue
        if cache.own_start(row) > start:  # some of its tokens sit in its cache's longer prefix: copied one by one
            keys, values = _token_range(cache, row, start, n)
            for layer in range(shape.layers):
                fresh.keys[layer][i, :, width - (n - start) : width] = keys[layer]
                fresh.values[layer][i, :, width - (n - start) : width] = values[layer]
            continue
        by_cache.setdefault(id(cache), (cache, []))[1].append((i, row, n))
    for cache, members in by_cache.values():
        source, target = _flat_indices(shape, cache, fresh, members, start)
        for store, into in ((cache.keys, fresh.keys), (cache.values, fresh.values)):
            for layer, old in enumerate(store):
                moved = old.view(-1, shape.head_dim).index_select(0, source)
                into[layer].view(-1, shape.head_dim).index_copy_(0, target, moved)
    return fresh


def _flat_indices(
    shape: CacheShape, cache: RowCache, fresh: RowCache, members: Sequence[tuple[int, int, int]], start: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each member's (fresh row i, its cache row, tokens kept n) tokens start..n-1 sit in `cache`'s key/value
    tensors and where they go in `fresh`'s, as indices of their [rows * kv heads * columns, head dim] views."""
    sources, targets = [], []
    heads = torch.arange(shape.kv_heads, device=shape.device)[:, None]
    for i, row, n in members:
        own = cache.own_start(row)
        columns = cache.own_columns(row)[start - own : n - own]
        into = torch.arange(fresh.length - len(columns), fresh.length, device=shape.device)
        sources.append(((row * shape.kv_heads + heads) * cache.capacity + columns).reshape(-1))
        targets.append(((i * shape.kv_heads + heads) * fresh.capacity + into).reshape(-1))
    return torch.cat(sources), torch.cat(targets)
