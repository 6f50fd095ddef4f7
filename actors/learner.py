"""Learner actors (`main-learner`, `sub-learner`): one per agent, reading **only** its own side's batch
stream, applying each aligned batch with the clipped objective on a DeepSpeed engine, and sending the
new weights to the same side's rollout engines (design.md §One training step, step 6).

A batch (all its chunks) is acked only once it is applied and its step recorded in a checkpoint
(`learners.<side>.checkpoint_every`; model, optimizer and the applied batch ids under
<run dir>/checkpoints/<side>, with a plain HF model directory): a learner killed before that gets the
batch again and, restarted from the checkpoint, applies it then: nothing applied twice, nothing
skipped. A redelivered batch of a checkpointed step is only acked. Without checkpoints
(`checkpoint_every: 0`) a batch is acked once applied and recorded in KV, and a restarted learner
resumes from the latest version its side announced (with a fresh optimizer).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.engines.weights import read_weights
from mgrpo_actors.learner.checkpoints import Checkpoints
from mgrpo_actors.learner.trainer import PolicyTrainer
from mgrpo_actors.learner.weights import WeightsStore, save_weights
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.pipeline.batch_rows import join_chunks
from mgrpo_actors.pipeline.policy_sync import latest_key
from mgrpo_actors.pipeline.reporting import publish_event, publish_metrics
from mgrpo_actors.runtime import HOLD, Bus, BusActor, Delivery, is_transient
from protocols import AlignedBatch, StepDone, WeightsVersion, decode, encode

__all__ = ["LearnerActor", "start_main_learner", "start_sub_learner"]


@dataclass(frozen=True)
class _Fatal:
    """Note to self: stop this learner (its node exits 1)."""

    error: str


class LearnerActor(BusActor):
    """One agent's learner."""

    def __init__(self, bus: Bus, config: NodeConfig, side: str) -> None:
        self.role = f"{side}-learner"  # before the base class binds its logger to it
        super().__init__(bus, name=f"{side}-learner-{bus.node}")
        self.side = side
        self.config = config
        self.cfg = getattr(config.learners, side)
        self.chunks: dict[str, list[tuple[AlignedBatch, Delivery]]] = {}
        self.applied: dict[str, Any] = {"step": -1, "batch_id": "", "version": 0, "history": []}
        self.unacked: list[Delivery] = []  # applied, waiting for the next checkpoint
        self.scratch = Path(tempfile.mkdtemp(prefix=f"mgrpo-{side}-learner-"))

    def handlers(self) -> dict:
        return {AlignedBatch: self.on_chunk}

    def on_start(self) -> None:
        super().on_start()
        torch.set_num_threads(self.config.agents.torch_threads)
        subjects = self.bus.subjects
        self.state = self.bus.kv(subjects.bucket("state"))
        self.versions = self.bus.kv(subjects.bucket("weights"))
        self.store = WeightsStore(self.bus, self.side, self.config.learners.weights, self.scratch)
        model, self.tokenizer = load_model(getattr(self.config.agents, self.side).model)
        self.checkpoints = Checkpoints(Path(self.config.run.dir) / self.bus.run_id / "checkpoints" / self.side)
        if self.checkpoints.latest() is None:
            self._resume(model)
        self.trainer = PolicyTrainer(model, self.tokenizer.pad_token_id, self.cfg, self.config.algo.objective)
        record = self.checkpoints.load(self.trainer)
        if record is not None:
            self.applied = record
            self.log.info("learner resumed from its checkpoint", step=record["step"], version=record["version"])
        self.consume(subjects.stream(f"batch-{self.side}"), f"{self.side}-learner", batch=10_000, max_ack_pending=10_000, ack_wait_s=self.config.pipeline.ack_wait_s)

    def _resume(self, model: torch.nn.Module) -> None:
        """Pick up where this side's learner was: the applied step from KV, the weights it last announced."""
        raw = self.state.get(f"learner.{self.side}")
        if raw is not None:
            self.applied = {"history": [], **json.loads(raw)}
        announced = self.versions.get(latest_key(self.side))
        if announced is None:
            return
        latest = decode(announced)
        assert isinstance(latest, WeightsVersion)
        if latest.version > self.applied["version"]:  # announced, then died before recording: it was applied
            self.applied = {**self.applied, "step": latest.step, "batch_id": "", "version": latest.version}
        path = self.store.fetch(latest)
        model.load_state_dict(read_weights(path), strict=False)
        self.store.release(path)
        self.log.info("learner resumed", version=latest.version, step=self.applied["step"])

    def on_chunk(self, chunk: AlignedBatch, delivery: Delivery) -> Any:
        if chunk.side != self.side:
            raise ValueError(f"a {chunk.side!r} batch on the {self.side} batch stream")
        if chunk.step <= self.applied["step"]:
            return None  # applied before (a redelivery after a restart): ack, never apply twice
        held = self.chunks.setdefault(chunk.batch_id, [])
        if any(c.chunk == chunk.chunk for c, _ in held):
            return None  # the same chunk again
        held.append((chunk, delivery))
        if len(held) == chunk.num_chunks:
            self._try_apply(chunk.batch_id)
        return HOLD

    def _try_apply(self, batch_id: str) -> None:
        """Apply a complete batch; if that fails, hand every chunk back. A failure that is not the bus's
        ends this actor, so the node exits 1 and a supervisor restarts it to resume from KV."""
        held = self.chunks.pop(batch_id)
        try:
            self._apply(batch_id, held)
        except Exception as exc:
            for _, delivery in held:
                delivery.nak(delay_s=1.0)
            if not is_transient(exc):
                self.log.error("batch could not be applied", batch_id=batch_id, error=f"{type(exc).__name__}: {exc}")
                self.actor_ref.tell(_Fatal(f"{type(exc).__name__}: {exc}"))
            else:
                self.log.warning("batch handed back after a passing failure", batch_id=batch_id, error=str(exc))

    def on_note(self, note: Any) -> Any:
        if isinstance(note, _Fatal):
            raise RuntimeError(f"{self.side} learner cannot apply its batch: {note.error}")
        return super().on_note(note)

    def _apply(self, batch_id: str, held: list[tuple[AlignedBatch, Delivery]]) -> None:
        batch = join_chunks([c for c, _ in held])
        stats = self.trainer.apply(batch)
        version = self.applied["version"] + 1
        path = save_weights(self.trainer.full_state_dict(), self.trainer.module, self.scratch / f"v{version}.safetensors")
        announced = self.store.publish(path, version, batch.step)
        self.versions.put(latest_key(self.side), encode(announced))
        self.bus.publish(self.bus.subjects.weights(self.side), announced)
        self.applied = {"step": batch.step, "batch_id": batch_id, "version": version, "history": [*self.applied["history"], batch_id]}
        self.state.put(f"learner.{self.side}", json.dumps(self.applied).encode())
        self.unacked += [delivery for _, delivery in held]
        every = self.cfg.checkpoint_every
        if every == 0 or len(self.applied["history"]) % every == 0:
            if every:
                self.checkpoints.save(self.trainer, self.tokenizer, f"step{batch.step}", self.applied)
            for delivery in self.unacked:
                delivery.ack()
            self.unacked = []
        figures = stats.as_dict()
        done = StepDone(run_id=self.bus.run_id, side=self.side, step=batch.step, batch_id=batch_id, version=version, loss=stats.loss, stats=figures, duration_s=stats.seconds)
        self.bus.js_publish(self.bus.subjects.step_done(self.side), done, msg_id=f"done-{batch_id}")
        publish_metrics(self.bus, f"{self.side}_learner", {**figures, "version": version}, batch.step, self.role)
        publish_event(self.bus, f"{self.side}.learned", f"{self.side} learner applied step {batch.step}: version {version}, loss {stats.loss:.4f}",
                      self.role, step=batch.step, version=version, **figures)  # fmt: skip


def start_main_learner(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """The main agent's learner (one per run; several ranks come with a launcher)."""
    started.append(LearnerActor.start_ready(bus, config, "main", timeout_s=600))


def start_sub_learner(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """The sub-agent's learner (one per run)."""
    started.append(LearnerActor.start_ready(bus, config, "sub", timeout_s=600))
