"""The vllm engine's logits processor (`LLM(logits_processors=[...])`, by import path): top-k and top-p by the
project's warpers (vllm_sampling.py), after vLLM's temperature, on the rows whose request carries
`warper_args`. This module imports vLLM: only vLLM's processes import it.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

from mgrpo_actors.engines.vllm_sampling import RowWarpers

__all__ = ["WarperLogitsProcessor"]


class WarperLogitsProcessor(LogitsProcessor):
    """Top-k, then top-p, by transformers' rules (logprobs.py), on rows whose request carries `warper_args`."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.warpers = RowWarpers()

    def is_argmax_invariant(self) -> bool:
        # Runs after the temperature, on sampled rows only, like vLLM's min-p: greedy decoding is unaffected.
        return True

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        self.warpers.update(batch_update)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return self.warpers.apply(logits)
