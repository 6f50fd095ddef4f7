"""The warm-up's attention: transformers' scaled-dot-product attention, computed in fp32 under bf16 autocast
(`fp32_attention`).

Under `warmup.dtype: bfloat16` the matrix products run in bf16 (autocast), and so, by autocast's rules, does sdpa. On a
CPU that makes training slower, not faster: torch's CPU flash-attention kernel computes its backward in bf16 several
times slower than in fp32. Measured on a 2-core Xeon with AMX-BF16 (torch 2.13, [8, 6, T, 32], causal, forward +
backward, best of 4): T = 120: 18.4 ms in bf16 against 4.6 ms in fp32; T = 360: 44.1 against 27.5; T = 700: 106.8
against 77.9. Longer sequences turn it round (head size 32, batch 8: T = 1,024, 150 ms in bf16 against 183; head size
64, 9 heads: T = 700, 32 against 35; T = 1,500, 86 against 109), so sequences longer than FP32_UP_TO keep autocast's
bf16. The linear layers, where bf16 pays, stay in bf16; only attention's inputs are cast up, and its output back down,
so the layers after it see what they saw before (docs/benchmarks.md §The warm-up's step time).

Registered through transformers' AttentionInterface under NAME, so the model definition stays transformers' own; the
warm-up selects it on its model for the length of the training and restores the model's own attention afterwards (a
saved model's config.json names no attention either way).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

__all__ = ["FP32_UP_TO", "NAME", "fp32_attention", "fp32_sdpa"]

NAME = "mgrpo_fp32_sdpa"
FP32_UP_TO = 768  # query positions up to which fp32 attention is the faster (measured crossover: 700-1,024 at head size
# 32, about 700 at 64; the module's docstring)


def fp32_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' sdpa; under autocast and for up to FP32_UP_TO query positions, on fp32 copies of the inputs
    with autocast off, the output in autocast's dtype (what autocast's own sdpa returns). The inputs come mixed: a
    Llama's queries and keys are fp32 after the rotary embedding (its cos and sin are fp32), its values bf16, and
    autocast would run all three in bf16."""
    device = query.device.type
    if not torch.is_autocast_enabled(device) or query.shape[2] > FP32_UP_TO:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if attention_mask is not None and attention_mask.is_floating_point():  # an additive mask: in the inputs' dtype
        attention_mask = attention_mask.float()
    with torch.autocast(device, enabled=False):
        out, weights = sdpa_attention_forward(
            module, query.float(), key.float(), value.float(), attention_mask, **kwargs
        )
    return out.to(torch.get_autocast_dtype(device)), weights


def _register() -> str:
    """Make NAME known to transformers (idempotent): the attention and sdpa's mask builder."""
    AttentionInterface.register(NAME, fp32_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    return NAME


@contextmanager
def fp32_attention(model: PreTrainedModel) -> Iterator[bool]:
    """Within the block, `model` (if it runs transformers' sdpa) computes attention with `fp32_sdpa`; yields whether
    it does. Its own attention is restored on leaving, however the block ends."""
    config = model.config
    own = getattr(config, "_attn_implementation", None)
    if own != "sdpa":  # eager, flash or a custom attention: left as it is
        yield False
        return
    config._attn_implementation = _register()
    try:
        yield True
    finally:
        config._attn_implementation = own
