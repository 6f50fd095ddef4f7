"""The rollout-engine interface: token ids in, sampled token ids and their behaviour logprobs out.

Every engine (hf, vllm) takes prompts as token ids and returns, per prompt, the ids it sampled, the
log-probability of each under the distribution it actually sampled from (after temperature, top-k and
top-p), why it stopped, and the policy version of the weights that produced it. Multi-turn rollouts
feed these ids straight back (agents/trajectory.py), so no text is ever re-tokenised into the loss.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, Union, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # torch is only needed by the engines themselves: configs import this module too
    import torch

__all__ = [
    "EngineConfig",
    "EngineUnavailable",
    "FinishReason",
    "Generation",
    "RolloutEngine",
    "RECHECK_IDS",
    "SamplingParams",
    "StopCheck",
    "asks_stop_check",
    "WeightsSource",
]

FinishReason = Literal["stop", "length"]
# A state dict (parameter name -> tensor), or a safetensors file / directory of them.
WeightsSource = Union[Mapping[str, "torch.Tensor"], str, os.PathLike[str]]  # noqa: UP007 (a string in `|` fails at run time)


class EngineUnavailable(RuntimeError):
    """An engine was selected whose optional dependency is not installed."""


RECHECK_IDS = 3  # a UTF-8 character is at most 4 bytes: the ids after a candidate that may complete its text


def asks_stop_check(check: StopCheck, token: int, since_candidate: int) -> bool:
    """Whether the engine asks `check` after sampling `token`, `since_candidate` ids after the row's last candidate
    (0: none yet)."""
    return token in check.candidates or 0 < since_candidate <= RECHECK_IDS


@runtime_checkable
class StopCheck(Protocol):
    """A test on a row's sampled ids that ends the row when True (its last id kept), as a stop string would. The
    engine asks it after sampling one of `candidates` (ids that can end what it looks for) and after each of the
    RECHECK_IDS ids that follow one (text that a candidate starts may complete with a later id: a character split
    across ids); it must be hashable (SamplingParams are grouped by value)."""

    candidates: frozenset[int]

    def __call__(self, ids: Sequence[int]) -> bool: ...


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one batch of continuations."""

    temperature: float = 1.0  # softmax temperature; 0 = greedy (behaviour logprobs then use temperature 1)
    top_p: float = 1.0  # nucleus sampling mass; 1.0 = off
    top_k: int = 0  # keep only the k most likely tokens; 0 = off
    max_new_tokens: int = 256  # generation budget per prompt (finish reason "length" when spent)
    stop_token_ids: tuple[int, ...] = ()  # stop on these as well as on the tokenizer's eos; the stop token is kept
    # hf's own decoding loop: also stop a row once stop_check(its sampled ids) is True (StopCheck; an agent's "the
    # turn's action block is complete": agents/episode.py ActionStop); other engines sample on (the agent cuts)
    stop_check: StopCheck | None = None
    seed: int | None = None  # seeds the sampling of this call; None = continue the engine's RNG stream

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens!r}")

    @property
    def greedy(self) -> bool:
        """True when decoding takes the argmax instead of sampling."""
        return self.temperature == 0.0


@dataclass(frozen=True)
class Generation:
    """One prompt's continuation as the engine sampled it (no padding, stop token included)."""

    token_ids: list[int]  # sampled ids, in order
    logprobs: np.ndarray  # float32 [len(token_ids)]: behaviour log-probability of each sampled id
    finish_reason: (
        FinishReason  # "stop": eos, a stop id or a stop_check ended it (at the last id); "length": budget spent
    )
    policy_version: int  # version of the weights that sampled it

    def __post_init__(self) -> None:
        if self.logprobs.dtype != np.float32 or self.logprobs.shape != (len(self.token_ids),):
            raise ValueError(
                f"logprobs must be float32 of shape ({len(self.token_ids)},), "
                f"got {self.logprobs.dtype} {self.logprobs.shape}"
            )


@dataclass(frozen=True)
class EngineConfig:
    """Placement and engine-specific settings of a rollout engine."""

    device: str | None = None  # hf: move the model here ("cpu", "cuda", "cuda:1"); None = leave it where it is
    dtype: str | None = None  # "float32", "bfloat16", "float16"; None = keep the model's (vllm: "auto")
    gpu_memory_utilization: float = 0.3  # vllm: GPU memory share for weights + KV cache (a learner may share the GPU)
    max_model_len: int | None = None  # vllm: longest prompt + generation; None = the model's maximum
    enforce_eager: bool = False  # vllm: skip CUDA-graph capture (faster start, slower decoding)
    narrow_finished_rows: bool = True  # hf: rows leave the batch as they finish (engines/decode.py NARROW_AT)
    continuous_batching: bool = False  # hf: episodes' turns join a running batch as they come (engines/continuous.py)


@runtime_checkable
class RolloutEngine(Protocol):
    """What the agents need from an engine."""

    policy_version: int  # version of the weights currently loaded

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt (prompts are token ids, already chat-formatted)."""
        ...

    def load_weights(self, weights: WeightsSource, version: int) -> None:
        """Replace the weights in place with a new policy version."""
        ...
