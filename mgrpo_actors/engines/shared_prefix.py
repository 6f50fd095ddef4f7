"""`SharedPrefix`: the keys and values of a prefix that the rows of a batch share (an agent's system prompt and its
worked example, the first ~500-700 tokens of every episode in `make run`), held once instead of once per row, and
attention over it for every row's queries at once (`attend_shared`).

Why: in decode, attention reads every row's cached keys and values once per step. When 12 rows share a 700-token
prefix, 12 copies of the same 700 columns were read (torch's CPU attention kernel over a row's cache ran at ~7-10
GB/s); held once, the prefix is read for blocks of every row's queries at once, not once per row (cascade attention,
as FlashInfer calls it).

How (docs/architecture.md §Engines): a row's attention is a softmax over its prefix columns and its own columns.
Attended separately, each part gives its output o and the log-sum-exp l of its scores; the whole is
    o = w·o_own + (1 − w)·o_prefix,  w = σ(l_own − l_prefix)
(the softmax of the two parts' masses, exp(l_own) / (exp(l_own) + exp(l_prefix))): exact in exact arithmetic, not
an approximation; in floating point it rounds as any split of the softmax's sum does (in bf16 the logits can move by
about one bf16 step). The prefix is kept in float32 whatever the engine's dtype (a bf16 value is exact in float32), and
attended by torch's CPU attention kernel in float32 with every row's queries at once; each row's own part stays that
kernel in the engine's dtype. Both return their log-sum-exp. Only on a CPU (the kernel is the CPU one); elsewhere a
cache keeps every row's prefix in its own columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["MIN_SHARED_READS", "PrefixView", "SharedPrefix", "attend_shared"]

# A prefix is made to be held once only where the rows that hold it, times its length, come to this many columns
# (one already held is kept down to half of it: copying it back into every row costs too): attention over two parts
# costs about 70-80 µs more a layer (a second kernel call, the merge), which the columns no longer read again must
# pay for. Measured on a 2-core AMD EPYC, one decode step's attention of a layer, SmolLM2's heads, 60 own columns a
# row: 12 rows break even at a prefix of about 200 columns, 4 rows at about 500; 2 rows at 512 were still 1.5x slower
# held once.
MIN_SHARED_READS = 2560


@dataclass(eq=False)
class SharedPrefix:
    """The keys and values of `tokens` at positions 0.. (per layer [kv heads, length, head dim], float32)."""

    tokens: tuple[int, ...]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        """The memory its keys and values take."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    @classmethod
    def from_parts(
        cls, tokens: Sequence[int], keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor]
    ) -> SharedPrefix:
        """From per-layer keys and values [kv heads, len(tokens), head dim] of any dtype (copied to float32)."""
        as_float = [k.to(torch.float32, copy=True).contiguous() for k in keys]
        return cls(
            tuple(int(t) for t in tokens), as_float, [v.to(torch.float32, copy=True).contiguous() for v in values]
        )


@dataclass(frozen=True)
class PrefixView:
    """What one forward's attention reads of a cache's shared prefix: the prefix, and the cache rows that hold it
    (None: every row)."""

    prefix: SharedPrefix
    rows: torch.Tensor | None


def attend_shared(
    view: PrefixView,
    layer: int,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Attention of `query` [rows, kv heads, queries, head dim] (a key/value head's grouped query heads stacked along
    the queries, as attention.py packs them) over each row's own `key`/`value` [rows, kv heads, columns, head dim]
    under the boolean `mask` [rows, 1, queries, columns] (True: attend), and, for the rows that hold it, over the
    shared prefix too. Every query must attend at least one own column, as RowCache.mask's always do: the CPU kernel
    gives a query with none a log-sum-exp of 0, not -inf. Returns [rows, kv heads, queries, head dim] in the query's
    dtype."""
    additive = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill_(~mask, float("-inf"))
    own, own_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, attn_mask=additive, scale=scale
    )
    rows = view.rows
    if rows is not None and rows.numel() == 0:  # the CPU kernel fails on no queries at all (SIGFPE)
        raise ValueError("a prefix view names no row: attend without one")
    part = query if rows is None else query.index_select(0, rows)
    n, kv_heads, queries, head_dim = part.shape
    # every row's queries of a key/value head against the prefix's columns of that head, as one batch of queries
    stacked = part.transpose(0, 1).reshape(1, kv_heads, n * queries, head_dim).to(torch.float32)
    keys, values = view.prefix.keys[layer][None], view.prefix.values[layer][None]
    prefix_out, prefix_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        stacked, keys, values, scale=scale
    )
    prefix_out = prefix_out.reshape(kv_heads, n, queries, head_dim).transpose(0, 1)
    prefix_lse = prefix_lse.reshape(kv_heads, n, queries).transpose(0, 1)
    own_part, own_part_lse = (
        (own, own_lse) if rows is None else (own.index_select(0, rows), own_lse.index_select(0, rows))
    )
    weight = torch.sigmoid(own_part_lse - prefix_lse)[..., None]  # the own part's share of the softmax's mass
    merged = prefix_out.add_(weight * (own_part.to(torch.float32) - prefix_out)).to(query.dtype)
    if rows is None:
        return merged
    return own.index_copy_(0, rows, merged)
