"""The learner's logprobs of a micro-batch's targets under its sampling settings (docs/method.md §Objective).

A large vocabulary makes the model's own `.logits` the largest tensors of a step: fp32 [n, T, vocab],
plus the warped and log-softmax copies the logprobs need (SmolLM2, vocab 49,152: 4 × 2,600 tokens took
21 GB). So, where the model allows it (`chunkable`), the forward returns the last hidden states instead
(the base model's output; the model's own lm_head then runs on its last position only), and the lm_head,
the sampling warpers and the log-softmax run on the loss positions alone, a chunk of positions at a time,
each chunk recomputed in backward rather than kept (engines/logprobs.py: `chunked_token_log_probs`).
Positions off the loss mask get no logprob (0): the objective never reads them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from mgrpo_actors.engines.logprobs import chunked_token_log_probs, token_log_probs
from mgrpo_actors.learner.micro_batches import MicroBatch
from mgrpo_actors.learner.shared_prefix import split_forward

__all__ = ["chunkable", "micro_batch_log_probs", "no_dropout"]

# Config fields of transformers' models that transform the logits after the output layer (Gemma 2's soft-cap,
# Cohere's scale, Granite's divisor): a model that sets one keeps its full logits.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def no_dropout(module: torch.nn.Module) -> int:
    """Set every dropout probability of `module` to 0 (nn.Dropout layers, and the `*dropout` floats attention
    layers read at call time, e.g. Llama's `attention_dropout`) and return how many were above 0. The engines
    sample without dropout, so a learner in train mode with it would score another policy than the behaviour
    one, and ρ on unchanged weights would be noise rather than 1 (docs/method.md §Objective)."""
    changed = 0
    for layer in module.modules():
        if isinstance(layer, torch.nn.Dropout) and layer.p > 0:
            layer.p, changed = 0.0, changed + 1
        for name, value in vars(layer).items():
            if name.endswith("dropout") and isinstance(value, float) and value > 0:
                setattr(layer, name, 0.0)
                changed += 1
    return changed


def chunkable(forward: Callable[..., Any], module: torch.nn.Module, device: torch.device | str = "cpu") -> bool:
    """Whether `module`'s logits are exactly its output layer applied to its last hidden state (no logit
    soft-capping or scaling after it) and its forward takes `logits_to_keep`: checked on the signature,
    then on a 4-token input (no grad, eval mode), so an architecture that does anything else keeps the
    full logits. `forward` is what the learner calls (the DeepSpeed engine: under ZeRO-3 every rank must
    call this, since the forward gathers the weights collectively). A config that names a soft-cap or a scale of
    the logits is refused outright: on a freshly initialised model the logits are too small for the check to tell
    `cap · tanh(x / cap)` from x."""
    config = getattr(module, "config", None)
    if any(getattr(config, name, None) for name in _LOGIT_TRANSFORMS):
        return False
    head = module.get_output_embeddings()
    if not isinstance(head, torch.nn.Module) or "logits_to_keep" not in inspect.signature(module.forward).parameters:
        return False
    vocab = int(getattr(module.config, "vocab_size", 0) or 0)
    if vocab < 2:
        return False
    ids = (torch.arange(4, dtype=torch.int64) % vocab)[None].to(device)
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            full = forward(input_ids=ids, use_cache=False).logits.float()
            out = forward(input_ids=ids, use_cache=False, output_hidden_states=True, logits_to_keep=1)
            hidden = out.hidden_states[-1] if out.hidden_states else None
            if hidden is None or hidden.shape[:2] != ids.shape:
                return False
            ours = head(hidden).float()
    finally:
        module.train(training)
    return ours.shape == full.shape and torch.allclose(ours, full, rtol=1e-4, atol=1e-4)


def micro_batch_log_probs(
    forward: Callable[..., Any],
    module: torch.nn.Module,
    mb: MicroBatch,
    chunk: int | None,
    device: Any,
    prefix: int = 0,
) -> torch.Tensor:
    """(n, T − 1) logprobs of `mb.targets` under `mb.sampling` (fp32), with grad.

    chunk: positions per chunk of the lm_head and log-softmax (chunked_token_log_probs), computed on
    the loss positions only (0 elsewhere); None: the model's own logits at every position at once.
    prefix: the first `prefix` tokens, which every row shares and no loss target is predicted from
    (shared_prefix.py shared_prefix_length), computed once for all rows; 0: every row whole.
    """
    targets = mb.targets[:, prefix:].to(device)
    if chunk is None:
        logits = _forward(forward, mb, prefix, device, chunked=False).logits[:, :-1]
        picked = token_log_probs(logits, targets, mb.sampling)
    else:
        hidden = _forward(forward, mb, prefix, device, chunked=True).hidden_states[-1][:, :-1]
        picked = _chunked(module, hidden, targets, mb.loss_mask[:, prefix:].to(device) > 0, mb, chunk)
    if not prefix:
        return picked
    logprobs = picked.new_zeros(mb.targets.shape)  # the prefix's targets are off the loss mask
    logprobs[:, prefix:] = picked
    return logprobs


def _forward(forward: Callable[..., Any], mb: MicroBatch, prefix: int, device: Any, chunked: bool) -> Any:
    """The model's output from position `prefix` on: logits, or (chunked) the last hidden states."""
    kwargs: dict[str, Any] = {"output_hidden_states": True, "logits_to_keep": 1} if chunked else {}
    if prefix:
        return split_forward(forward, mb, prefix, device, **kwargs)
    return forward(
        input_ids=mb.input_ids.to(device), attention_mask=mb.attention_mask.to(device), use_cache=False, **kwargs
    )


def _chunked(
    module: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    on_loss: torch.Tensor,
    mb: MicroBatch,
    chunk: int,
) -> torch.Tensor:
    """Logprobs [rows, positions] of the targets on the loss positions (0 elsewhere), a chunk at a time."""
    if not bool(on_loss.any()):
        # No loss token: one position anyway, so the lm_head stays in the graph (its gradient is 0).
        on_loss = on_loss.clone()
        on_loss[0, 0] = True
    picked = chunked_token_log_probs(
        hidden[on_loss], module.get_output_embeddings(), targets[on_loss], mb.sampling, chunk
    )
    logprobs = picked.new_zeros(on_loss.shape)
    logprobs[on_loss] = picked
    return logprobs
