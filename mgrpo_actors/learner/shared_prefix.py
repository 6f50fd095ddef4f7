"""The learner's forward with a micro-batch's shared prefix computed once (docs/method.md §Objective).

The samples of a batch start alike: every episode of an agent opens with the same system prompt and
worked example (SmolLM2's M: 481 tokens of ~650, S: 707 of ~1,200), and the K rollouts of one question
share the question too. A decoder's state at a position depends only on the tokens before it, so the
keys and values of a prefix every row shares are the same for every row: here they are computed once,
by a forward over that prefix alone (one row), and every row's remaining tokens attend to them as a
past key/value cache broadcast over the rows. Backward sums each row's gradient with respect to the
shared keys and values before going through the prefix's layers once, so values and gradients are the
full forward's (up to the rounding of a different summation order); compute on the prefix drops from
one pass per row to one per micro-batch.

The prefix stops before the first position whose hidden state predicts a loss target: logprobs come
from the rows' own pass only (forward.py's lm_head, warpers and log-softmax, chunked or not). Each row
keeps at least one token of its own. Rotary positions continue from the prefix's length; the mask is
the engine's kind (a boolean [rows, 1, new, prefix + new]: the whole prefix, causally the row's own
valid tokens), so a padded position still attends to the prefix and its softmax stays finite.

Used where the model's decoder layers take an external cache object and explicit positions
(models/families.py `takes_external_cache`: Llama, Qwen2, Qwen3 without sliding windows) and attend through
sdpa (which reads the boolean mask as one; eager attention would add it to the scores, masking nothing),
without activation checkpointing (transformers drops the cache under it) and below ZeRO-3 (learner/trainer.py
decides).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.learner.micro_batches import MicroBatch
from mgrpo_actors.models.families import takes_external_cache

__all__ = ["PrefixCache", "PrefixRecorder", "shared_prefix_length", "shares_prefixes", "split_forward"]


def shares_prefixes(cfg: LearnerConfig, stage: int, module: torch.nn.Module) -> bool:
    """Whether micro-batches compute their shared prefix once (learners.<side>.shared_prefix_tokens,
    shared_prefix.py): a model whose layers take an external cache and attend through sdpa (eager attention
    would add the prefix path's boolean mask to its scores), no activation checkpointing (transformers drops a
    cache under it), below ZeRO-3 (whose parameter gathering is left to run one forward per micro-batch)."""
    wanted = cfg.shared_prefix_tokens > 0 and not cfg.activation_checkpointing
    sdpa = getattr(getattr(module, "config", None), "_attn_implementation", None) == "sdpa"
    return wanted and stage < 3 and takes_external_cache(module) and sdpa


def shared_prefix_length(mb: MicroBatch, min_tokens: int) -> int:
    """Tokens of `mb` to compute once for every row: the longest prefix all rows share (real tokens, the
    same ids), cut before the first hidden state a loss target needs (target j is predicted at position j)
    and so that every row keeps one token of its own; 0 when under `min_tokens`, or for a single row (no
    row to share with)."""
    rows = mb.input_ids.shape[0]
    on_loss = (mb.loss_mask > 0).any(0)
    if rows < 2 or min_tokens <= 0 or not bool(on_loss.any()):
        return 0  # nobody to share with, or no target: the rows' own pass would keep no loss position
    valid = mb.attention_mask.bool()
    same = (mb.input_ids == mb.input_ids[:1]).all(0) & valid.all(0)
    common = int(same.int().cumprod(0).sum())
    first_loss = int(on_loss.int().argmax())
    shortest = int(valid.sum(-1).min())
    prefix = min(common, first_loss, shortest - 1)
    return prefix if prefix >= min_tokens else 0


class PrefixRecorder:
    """The cache object of the prefix's forward: keeps each layer's keys and values (with their graph) and
    hands them back unchanged, so the layer attends to the prefix itself."""

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: object, **kwargs: object):
        self.keys[layer_idx], self.values[layer_idx] = key, value
        return key, value

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0


class PrefixCache:
    """The cache object of the rows' forward: each layer's prefix keys and values, broadcast over `rows`,
    ahead of the rows' own. Nothing is stored (an update is a pure function of its inputs)."""

    def __init__(self, recorder: PrefixRecorder, rows: int, length: int) -> None:
        self.recorder, self.rows, self.length = recorder, rows, length

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: object, **kwargs: object):
        shared_k = self.recorder.keys[layer_idx].expand(self.rows, -1, -1, -1)
        shared_v = self.recorder.values[layer_idx].expand(self.rows, -1, -1, -1)
        return torch.cat([shared_k, key], dim=2), torch.cat([shared_v, value], dim=2)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length


def split_forward(forward: Callable[..., Any], mb: MicroBatch, prefix: int, device: Any, **kwargs: Any) -> Any:
    """The model's output for every row's tokens from position `prefix` on (logits or hidden states as
    `kwargs` ask), the first `prefix` tokens computed once (their logits never: logits_to_keep=1)."""
    ids = mb.input_ids.to(device)
    rows, width = ids.shape
    recorder = PrefixRecorder()
    causal = torch.ones(prefix, prefix, dtype=torch.bool, device=device).tril()
    forward(
        input_ids=ids[:1, :prefix],
        attention_mask=causal[None, None],
        position_ids=torch.arange(prefix, device=device)[None],
        past_key_values=recorder,
        use_cache=True,
        logits_to_keep=1,
    )
    new = width - prefix
    own = mb.attention_mask[:, prefix:].to(device).bool()  # [rows, new]
    within = torch.ones(new, new, dtype=torch.bool, device=device).tril()[None] & own[:, None, :]
    mask = torch.cat([torch.ones(rows, new, prefix, dtype=torch.bool, device=device), within], dim=-1)
    positions = (prefix + torch.arange(new, device=device))[None].expand(rows, new)
    return forward(
        input_ids=ids[:, prefix:],
        attention_mask=mask[:, None],
        position_ids=positions,
        past_key_values=PrefixCache(recorder, rows, prefix),
        use_cache=True,
        **kwargs,
    )
