"""What the main-agent and sub-agent actors share: the agent's model on its rollout engine, kept at its
side's newest policy version (weights/sync.py), requests batched as they arrive
(runtime/batching.py), per-process sampling seeds, and call statistics for the metrics."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, ClassVar

import torch

from mgrpo_actors.agents.setup import load_agent
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.controller.schedule import node_seed
from mgrpo_actors.engines.compute_thread import ComputeThreadEngine
from mgrpo_actors.rollout.calls import CallStats
from mgrpo_actors.rollout.driver import AgentModel, step_seed
from mgrpo_actors.runtime import HOLD, Bus, BusActor, Delivery, PendingBatch, RunBatch
from mgrpo_actors.runtime.compute import compute_thread_running, on_compute_thread
from mgrpo_actors.weights.store import WeightsStore
from mgrpo_actors.weights.sync import PolicySync
from protocols import WeightsVersion

__all__ = ["AgentActor"]


class AgentActor(BusActor):
    """Base of the agent actors. A subclass sets `side` and `role`, handles its request type with
    `on_request`, and runs what queued up in `run_batch(batch)` (a list of (request, delivery))."""

    side: ClassVar[str] = ""

    def __init__(self, bus: Bus, config: NodeConfig, batch_size: int, name: str | None = None) -> None:
        super().__init__(bus, name=name or f"{self.role}-{bus.node}")
        self.config = config
        self.pipeline = config.pipeline
        self.pending: PendingBatch[tuple[Any, Delivery]] = PendingBatch(
            self.actor_ref, batch_size, gather_s=self.pipeline.batch_gather_s
        )
        self.batches = 0
        self.calls = CallStats()

    def start_engine(self) -> None:
        """Load the side's model on its engine (on the process's compute thread, if it has one: runtime/compute.py)
        and follow the side's weight announcements (from on_start)."""
        threads = self.config.agents.torch_threads

        def load() -> AgentModel:
            torch.set_num_threads(threads)
            return load_agent(self.config.agent(self.side))

        loaded = on_compute_thread(load)
        if compute_thread_running():  # generation and weight loads go to the compute thread too
            loaded = AgentModel(ComputeThreadEngine(loaded.engine, threads), loaded.tokenizer)
        self.model = loaded
        store = WeightsStore(
            self.bus,
            self.side,
            self.config.learners.weights,
            Path(tempfile.mkdtemp(prefix=f"mgrpo-{self.side}-weights-")),
        )
        self.policy = PolicySync(self.bus, self.side, self.model.engine, store)
        self.listen(self.bus.subjects.weights(self.side))

    def on_stop(self) -> None:
        super().on_stop()
        close = getattr(getattr(getattr(self, "model", None), "engine", None), "close", None)
        if callable(close):  # vllm: its engine core and workers are processes, freed now, not at the node's exit
            close()

    def batch_seed(self, step: int) -> int | None:
        """The next batch's sampling seed: each process its own stream, so two agents given the same
        task do not answer alike."""
        self.batches += 1
        return step_seed(self.config.run.seed, step, self.batches - 1, node_seed(self.bus.node))

    def on_request(self, request: Any, delivery: Delivery) -> Any:
        self.pending.add((request, delivery))
        return HOLD

    def on_weights(self, announced: WeightsVersion, delivery: Delivery) -> None:
        self.policy.load(announced)  # between batches: this actor runs one thing at a time

    def on_note(self, note: Any) -> Any:
        if isinstance(note, RunBatch):
            batch = [(r, d) for r, d in self.pending.take() if not d.handed_back]
            if batch:
                self.run_batch(batch)
            return None
        return super().on_note(note)

    def run_batch(self, batch: list[tuple[Any, Delivery]]) -> None:
        """Defined by each agent (see the class docstring)."""
        raise TypeError(f"{type(self).__name__} does not define run_batch")
