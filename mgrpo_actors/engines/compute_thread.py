"""`ComputeThreadEngine`: a rollout engine whose generation and weight loads run on the process's compute thread
(runtime/compute.py: why one thread computes for every actor of a process), at the agents' torch threads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mgrpo_actors.engines.base import Generation, RolloutEngine, SamplingParams
from mgrpo_actors.runtime.compute import on_compute_thread

__all__ = ["ComputeThreadEngine"]


class ComputeThreadEngine:
    """`engine` with generate and load_weights run on the compute thread at `threads` torch threads; everything
    else (policy_version, loads_deltas, device, close, …) is the engine's own."""

    def __init__(self, engine: RolloutEngine, threads: int) -> None:
        self._engine, self._threads = engine, threads

    def _at_threads(self, fn: Any, *args: Any) -> Any:
        if torch.get_num_threads() != self._threads:  # a learner may have set its own share on this thread
            torch.set_num_threads(self._threads)
        return fn(*args)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        return on_compute_thread(self._at_threads, self._engine.generate, prompts, params)

    def load_weights(self, weights: Any, version: int) -> None:
        on_compute_thread(self._at_threads, self._engine.load_weights, weights, version)

    def continuous_batch(self) -> _OnComputeThread:
        """The engine's continuous batch (engines/continuous.py), its submits and steps on the compute thread."""
        return _OnComputeThread(on_compute_thread(self._engine.continuous_batch), self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # never the engine's private parts, nor a loop while _engine is not set yet
            raise AttributeError(name)
        return getattr(self._engine, name)


class _OnComputeThread:
    """A ContinuousBatch whose submit and step run on the compute thread."""

    def __init__(self, batch: Any, engine: ComputeThreadEngine) -> None:
        self._batch, self._engine = batch, engine

    def submit(self, prompt: Sequence[int], params: SamplingParams) -> int:
        return on_compute_thread(self._batch.submit, prompt, params)

    def step(self) -> list[tuple[int, Generation]]:
        return on_compute_thread(self._engine._at_threads, self._batch.step)

    @property
    def busy(self) -> bool:
        return self._batch.busy

    @property
    def running(self) -> int:
        return self._batch.running
