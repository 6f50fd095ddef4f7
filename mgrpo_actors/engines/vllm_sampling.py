"""Top-k and top-p inside vLLM with the project's own warpers, so vLLM samples the distribution the learner scores.

vLLM's own top-k/top-p is not transformers': its Triton top-k/top-p kernel keeps exactly k tokens, while
transformers' top-k rule (the hf engine's and the learner's, logprobs.py and nucleus.py) keeps every token
tied with the k-th, and bf16 logits make such ties plausible: the learner would then normalise over more
tokens than were sampled from. So the engine switches vLLM's top-k/top-p off and passes them in the request's
`extra_args` (`warper_args`); a vLLM logits processor (vllm_processor.py) runs `RowWarpers.apply` after
vLLM's temperature and before its sampler, through `sampling_warpers` itself: temperature, then
top-k, then top-p, by transformers' rules (nucleus.py), on float32 logits. vLLM's processed logprobs are then
log-softmax of exactly these scores.

`RowWarpers` is the state such a processor keeps (which row of vLLM's persistent batch has which
(top_k, top_p)), without vLLM: tested on CPU in tests/unit/engines/test_vllm_sampling.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from mgrpo_actors.engines.base import SamplingParams
from mgrpo_actors.engines.logprobs import sampling_warpers

__all__ = ["EXTRA_ARGS_KEY", "RowWarpers", "warper_args"]

EXTRA_ARGS_KEY = "mgrpo_warpers"  # SamplingParams.extra_args[EXTRA_ARGS_KEY] = [top_k, top_p]


def warper_args(params: SamplingParams) -> dict[str, list[float]] | None:
    """The request's extra_args for the logits processor: None when greedy or when top-k and top-p are off."""
    if params.greedy or (params.top_k == 0 and params.top_p >= 1.0):
        return None
    return {EXTRA_ARGS_KEY: [params.top_k, params.top_p]}


def _row_state(sampling_params: Any) -> tuple[int, float] | None:
    extra = getattr(sampling_params, "extra_args", None) or {}
    value = extra.get(EXTRA_ARGS_KEY) if isinstance(extra, Mapping) else None
    if value is None or getattr(sampling_params, "temperature", 1.0) < 1e-5:  # greedy rows ignore warpers
        return None
    top_k, top_p = value
    return int(top_k), float(top_p)


class RowWarpers:
    """(top_k, top_p) per row of vLLM's persistent batch, and the masking they ask for."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[int, float]] = {}

    def update(self, batch_update: Any) -> None:
        """Apply a vLLM BatchUpdate (None: the batch did not change): removed, then added, then moved rows."""
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for added in batch_update.added:
            index, sampling_params = added[0], added[1]  # (index, params, [prompt ids,] output ids) by version
            state = _row_state(sampling_params)
            if state is None:
                self.rows.pop(index, None)
            else:
                self.rows[index] = state
        for a, b, direction in batch_update.moved:
            moved_a, moved_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if moved_a is not None:
                self.rows[b] = moved_a
            if moved_b is not None and getattr(direction, "name", str(direction)).endswith("SWAP"):
                self.rows[a] = moved_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Mask logits [rows, vocab] (already divided by the temperature) in place: each registered row through
        `sampling_warpers(top_k, top_p)`, rows of equal settings in one call."""
        if not self.rows:
            return logits
        groups: dict[tuple[int, float], list[int]] = {}
        for index, state in self.rows.items():
            if index < logits.shape[0]:
                groups.setdefault(state, []).append(index)
        for (top_k, top_p), indices in groups.items():
            warpers = sampling_warpers(SamplingParams(temperature=1.0, top_k=top_k, top_p=top_p))
            rows = torch.tensor(indices, device=logits.device)
            logits[rows] = warpers(None, logits[rows].float()).to(logits.dtype)
        return logits
