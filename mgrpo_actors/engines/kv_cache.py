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

The object is what transformers' decoder layers call `update(key, value, layer_idx)` on (the models
this engine supports: engines/hf.py); it stores nothing about the model beyond the shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

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
        """Rotary positions [rows, width] of a block of new columns: each row counts its valid columns only
        (a hole gets position 0: it is masked out everywhere)."""
        before = self.valid[:, : self.length].sum(-1, keepdim=True)
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


def gathered(shape: CacheShape, picks: Sequence[tuple[RowCache | None, int, int]], extra: int) -> RowCache:
    """A new cache whose row i holds the first n valid tokens of row `row` of `cache` for picks[i] = (cache, row, n)
    (cache None or n 0: nothing), right-aligned without holes, with room for `extra` more columns. The rows may come
    from several caches (decode.py's narrowed batches): each cache's rows are gathered in one copy."""
    width = max((n for _, _, n in picks), default=0)
    fresh = RowCache(shape, len(picks), width + extra)
    if width == 0:
        return fresh
    by_cache: dict[int, tuple[RowCache, list[int]]] = {}
    for i, (cache, _, n) in enumerate(picks):
        if cache is not None and n > 0:
            by_cache.setdefault(id(cache), (cache, []))[1].append(i)
    for cache, members in by_cache.values():
        columns = torch.zeros(len(members), width, dtype=torch.long, device=shape.device)
        rows = torch.zeros(len(members), dtype=torch.long, device=shape.device)
        for j, i in enumerate(members):
            _, row, n = picks[i]
            columns[j, width - n :] = torch.nonzero(cache.valid[row, : cache.length]).squeeze(-1)[:n]
            fresh.valid[i, width - n : width] = True
            rows[j] = row
            fresh.tokens[i] = cache.tokens[row][:n]
        at = torch.as_tensor(members, dtype=torch.long, device=shape.device)
        where = columns[:, None, :, None].expand(len(members), shape.kv_heads, width, shape.head_dim)
        for store, into in ((cache.keys, fresh.keys), (cache.values, fresh.values)):
            for layer, old in enumerate(store):
                into[layer][at, :, :width] = old[:, :, : cache.length].index_select(0, rows).gather(2, where)
    fresh.length = width
    return fresh
