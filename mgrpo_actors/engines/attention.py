"""The rollout engine's attention: transformers' scaled-dot-product attention, with grouped-query heads
packed instead of repeated and the engine's own boolean mask (kv_cache.RowCache.mask).

transformers repeats each key/value head once per query head of its group whenever a mask is given on a
CPU (`repeat_kv`): a copy of the whole cache, every layer, every decoded token. Here a group's query
heads are stacked along the query axis instead, so every query of the group attends to the one
key/value head it shares, with no copy; the mask (one per row, the same for every head) is stacked the
same way. Registered under NAME through transformers' AttentionInterface, so the model definition
stays transformers' own; only the rollout engine's model selects it. Anyone else calling that model
(a forward pass without a mask, a padded batch) gets transformers' own sdpa behaviour: the mask
interface builds sdpa's masks for NAME, and a call without a mask goes to sdpa as it is (causal).

A forward whose cache holds a prefix shared by its rows once (kv_cache.py, shared_prefix.py) passes it as the
`shared_prefix` keyword (a PrefixView; transformers hands a model's extra keywords on to its attention functions):
attention then covers the prefix and each row's own columns (shared_prefix.attend_shared).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from mgrpo_actors.engines.shared_prefix import PrefixView, attend_shared

__all__ = ["NAME", "packed_sdpa", "register"]

NAME = "mgrpo_packed_sdpa"


def packed_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    shared_prefix: PrefixView | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """query [b, heads, q, d], key/value [b, kv heads, k, d], attention_mask bool [b, 1, q, k] (True:
    attend); returns [b, q, heads, d] as transformers' attention functions do. shared_prefix: the cache's prefix
    held once for the rows it names, attended besides each row's own columns."""
    if attention_mask is None:  # not the engine's call: sdpa decides causality itself
        if shared_prefix is not None:
            raise ValueError("a shared prefix needs the engine's mask (kv_cache.RowCache.mask)")
        return sdpa_attention_forward(module, query, key, value, None, dropout=dropout, scaling=scaling, **kwargs)
    b, heads, q, d = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    # Query head h belongs to key/value head h // group (transformers' repeat_kv order).
    packed = query.reshape(b, kv_heads, group * q, d)
    mask = attention_mask
    if group > 1:
        mask = mask[:, :, None].expand(b, 1, group, q, mask.shape[-1]).reshape(b, 1, group * q, mask.shape[-1])
    if shared_prefix is not None:
        scale = scaling if scaling is not None else d**-0.5
        out = attend_shared(shared_prefix, module.layer_idx, packed, key, value, mask, scale)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(b, heads, q, d).transpose(1, 2).contiguous(), None


def register() -> str:
    """Make NAME known to transformers (idempotent); returns NAME."""
    AttentionInterface.register(NAME, packed_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    return NAME
