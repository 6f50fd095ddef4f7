"""Learner actors (`main-learner`, `sub-learner`): one per agent, reading **only** its own side's batch
stream, applying each aligned batch with the clipped objective on a DeepSpeed engine, and sending the
new weights to the same side's rollout engines (docs/architecture.md §One training step, step 6).

A batch (all its chunks) is acked only once it is applied and its step recorded in a checkpoint
(`learners.<side>.checkpoint_every`; model, optimizer and the applied batch ids under
<run dir>/checkpoints/<side>, with a plain HF model directory): a learner killed before that gets the
batch again and, restarted from the checkpoint, applies it then: nothing applied twice, nothing
skipped. A redelivered batch of a checkpointed step is only acked (and its StepDone sent again, in case the
learner died before sending it; the de-duplication id drops a repeat). Without checkpoints
(`checkpoint_every: 0`) a batch is acked once applied and recorded in KV, and a restarted learner
resumes from the latest version its side announced (with a fresh optimizer).

Batches are applied in step order. Samples generated more than `pipeline.max_staleness` policy versions
before the learner's current one (possible in async mode and with `advance_on: batches`) are dropped (weight 0)
and counted (`stale_dropped`), their groups' survivors normalised again (learner/batch_filters.py); the staleness
seen is published (`staleness_mean`, `staleness_max`). The others keep the behaviour logprobs they were sampled
with, so the ratio corrects for their age (docs/method.md §Objective).

This module is the role's shell (the DeepSpeed trainer calls, publishing the weights, KV, acks): the chunk
assembly, the step order, the versions reported again, the resume record and when to ack are
mgrpo_actors/learner/ordering.py; the retried writes after the optimizer step mgrpo_actors/learner/after_step.py.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from mgrpo_actors.alignment.batch_rows import join_chunks
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.learner.after_step import write_after_step
from mgrpo_actors.learner.batch_checks import BatchCheck, check_batch
from mgrpo_actors.learner.batch_filters import drop_stale, signed_advantages
from mgrpo_actors.learner.checkpoints import Checkpoints, export_hf
from mgrpo_actors.learner.ordering import (
    AckSchedule,
    Arrival,
    BatchAssembler,
    applied_count,
    next_record,
    resumed_record,
    step_version,
)
from mgrpo_actors.learner.ranks import lead, stop_followers
from mgrpo_actors.learner.reference import reference_model
from mgrpo_actors.learner.trainer import PolicyTrainer
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.monitoring.publish import publish_event, publish_metrics
from mgrpo_actors.runtime import HOLD, Bus, BusActor, Delivery, is_transient
from mgrpo_actors.runtime.compute import on_compute_thread
from mgrpo_actors.runtime.crossing import publish_crossing
from mgrpo_actors.runtime.disk import DiskFullError
from mgrpo_actors.runtime.retention import ConsumedWork
from mgrpo_actors.weights.chain import rebuild
from mgrpo_actors.weights.delta import wire_dtype
from mgrpo_actors.weights.encoder import WeightsEncoder, WrittenVersion
from mgrpo_actors.weights.files import tied_aliases
from mgrpo_actors.weights.store import WeightsStore
from mgrpo_actors.weights.sync import latest_key
from protocols import DEFAULT_SUB_TYPE, AlignedBatch, StepDone, WeightsVersion, decode, encode

T = TypeVar("T")

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
        self.cfg = config.learner(side)
        self.batches: BatchAssembler[Delivery] = BatchAssembler()
        self.applied: dict[str, Any] = resumed_record(None, None)
        self.acks: AckSchedule[Delivery] = AckSchedule(self.cfg.checkpoint_every)
        self.stepped = False  # the batch being applied has changed the weights (no retry in this process)
        self.refused = 0  # batches dead-lettered by the checks (learner/batch_checks.py), never trained on
        self.halted = ""  # why this learner takes no more batches (a write of a batch's found the disk full)
        self.scratch = Path(tempfile.mkdtemp(prefix=f"mgrpo-{side}-learner-"))

    def handlers(self) -> dict:
        return {AlignedBatch: self.on_chunk}

    def on_start(self) -> None:
        super().on_start()
        # torch threads: learners.<side>.torch_threads, set by the trainer while it applies a batch
        subjects = self.bus.subjects
        self.state = self.bus.kv(subjects.bucket(f"state-{self.side}"))
        self.versions = self.bus.kv(subjects.bucket(f"versions-{self.side}"))
        self.store = WeightsStore(self.bus, self.side, self.config.learners.weights, self.scratch)
        self.consumed = ConsumedWork(self.bus, f"{self.side}-learner", self.config.nats.keep_consumed_steps)
        on_compute_thread(self._build)  # the model, its trainer and checkpoint: torch work (runtime/compute.py)
        lead(self.trainer)  # with several ranks (a launcher), the others follow this one: mgrpo_actors/learner/ranks.py
        spec = self.bus.durables[f"{self.side}-learner"]
        self.consume(
            *spec.where(subjects),
            batch=spec.max_ack_pending,
            max_ack_pending=spec.max_ack_pending,
            ack_wait_s=self.config.pipeline.ack_wait_s,
        )

    def _build(self) -> None:
        """Load the side's model, take the KL reference, resume where the side was, and build the trainer."""
        agent = self.config.agent(self.side)
        model, self.tokenizer = load_model(agent.model)
        # The KL term's reference is the run's starting weights: taken now, before a resume below loads others.
        reference = reference_model(self.cfg, self.config.algo.objective, model)
        # Each version a full snapshot or a delta, in the dtype the side's engines run (bf16) or the learner's;
        # the first this process writes is full (docs/architecture.md §Weights: full snapshots and deltas).
        self.weights = WeightsEncoder(
            wire_dtype(agent.dtype, self.cfg.dtype), self.config.learners.weights.full_every, tied_aliases(model)
        )
        self.checkpoints = Checkpoints(Path(self.config.run.dir) / self.bus.run_id / "checkpoints" / self.side)
        # learners.<side>.export_every
        self.exports = Path(self.config.run.dir) / self.bus.run_id / "exports" / self.side
        if self.checkpoints.latest() is None:
            self._resume(model)
        elif self.state.get(f"learner.{self.side}") is None:
            # Every checkpoint follows a KV record in the same NATS store: this one is an earlier run's.
            raise RuntimeError(
                f"{self.checkpoints.directory} holds checkpoints of an earlier run with id {self.bus.run_id!r}, "
                "but this run's NATS state is new: use another run.id or run.dir, or delete that directory"
            )
        self.trainer = PolicyTrainer(
            model, self.tokenizer.pad_token_id, self.cfg, self.config.algo.objective, reference=reference
        )
        record = self.checkpoints.load(self.trainer)
        if record is not None:
            self.applied = record
            self.log.info("learner resumed from its checkpoint", step=record["step"], version=record["version"])

    def on_stop(self) -> None:
        super().on_stop()
        stop_followers(getattr(self, "trainer", None))  # the learner's other ranks, if any, exit with it

    def on_failure(self, *exc_info: Any) -> None:
        super().on_failure(*exc_info)
        stop_followers(getattr(self, "trainer", None))  # a failed learner's other ranks must not wait for it

    def _resume(self, model: torch.nn.Module) -> None:
        """Pick up where this side's learner was: the applied step from KV, the weights it last announced."""
        raw = self.state.get(f"learner.{self.side}")
        saved = json.loads(raw) if raw is not None else None
        announced = self.versions.get(latest_key(self.side))
        if announced is None:
            self.applied = resumed_record(saved, None)
            return
        latest = decode(announced)
        assert isinstance(latest, WeightsVersion)
        self.applied = resumed_record(saved, (latest.step, latest.version))
        model.load_state_dict(rebuild(self.store, latest), strict=False)  # its full snapshot and the deltas after
        self.log.info("learner resumed", version=latest.version, step=self.applied["step"])
        if self.weights.dtype != getattr(torch, self.cfg.dtype):
            # Without a checkpoint the announced weights are all there is, in the engines' dtype.
            self.log.warning(
                "learner resumed from weights rounded to the engines' dtype: no checkpoint to resume exactly from "
                "(learners.<side>.checkpoint_every >= 1 keeps one)",
                wire_dtype=str(self.weights.dtype).removeprefix("torch."),
                learner_dtype=self.cfg.dtype,
            )

    def on_chunk(self, chunk: AlignedBatch, delivery: Delivery) -> Any:
        if chunk.side != self.side:
            raise ValueError(f"a {chunk.side!r} batch on the {self.side} batch stream")
        if self.halted:  # neither applied nor reported as applied: --resume (from the last checkpoint) needs it
            return HOLD  # unsettled: handed back when the node stops
        arrival = self.batches.add(chunk, delivery, self.applied["step"])
        if arrival is Arrival.APPLIED_BEFORE:
            self._report_again(chunk)  # a redelivery after a restart: never apply twice
            return None
        if arrival is Arrival.DUPLICATE:
            return None  # the same chunk again (acked)
        if arrival is Arrival.COMPLETE:
            self._apply_due()
        return HOLD

    def _report_again(self, chunk: AlignedBatch) -> None:
        """StepDone for a step applied before: a learner killed between its checkpoint and its report
        must still tell the controller (the de-duplication id drops the repeat of a report that went out)."""
        done = StepDone(
            run_id=self.bus.run_id,
            side=self.side,
            step=chunk.step,
            batch_id=chunk.batch_id,
            version=step_version(self.applied, chunk.step),
            loss=0.0,
            stats={"reported_again": 1.0},
        )
        self.bus.js_publish(self.bus.subjects.step_done(self.side), done, msg_id=f"done-{chunk.batch_id}")

    def _apply_due(self) -> None:
        """Apply whole batches in step order (BatchAssembler.next_due): a later step waits for the one before it."""
        while (due := self.batches.next_due(self.applied["step"])) is not None:
            if not self._try_apply(*due):
                return
        if waiting := self.batches.waiting():
            self.log.info("batches wait for an earlier step", waiting=waiting, next_step=self.applied["step"] + 1)

    def _refused(self, batch: AlignedBatch, held: list[tuple[AlignedBatch, Delivery]]) -> bool:
        """Whether `batch` is one no aligner of this run could have built (learner/batch_checks.py): then every
        chunk is dead-lettered with the reason and counted, nothing is trained, and the step waits for a batch
        that passes."""
        pipeline, algo = self.config.pipeline, self.config.algo
        try:
            check_batch(
                batch,
                self.bus.run_id,
                self.side,
                pipeline.queries_per_step * pipeline.rollouts_per_query,
                algo.alignment,
                algo.advantages,
                queries=pipeline.queries_per_step,
                newest_version=self._newest_version(),
            )
            return False
        except BatchCheck as exc:
            reason = f"batch {batch.batch_id} of step {batch.step} refused: {exc}"
        self.refused += 1
        for _, delivery in held:
            self.bus.dead_letter(delivery, reason, "BatchCheck", actor=self.name)
        self.log.error("batch refused: not trained on", batch_id=batch.batch_id, step=batch.step, reason=reason)
        publish_event(self.bus, f"{self.side}.refused", reason, self.role, level="error", step=batch.step)
        publish_metrics(self.bus, f"{self.side}_learner_refused", {"batches": self.refused}, batch.step, self.role)
        return True

    def _newest_version(self) -> int:
        """The newest weights version this side announced (KV), or the applied one if none was: no engine can have
        sampled with a newer one."""
        announced = self.versions.get(latest_key(self.side))
        newest = decode(announced).version if announced is not None else 0
        return max(newest, self.applied["version"])

    def _try_apply(self, batch_id: str, held: list[tuple[AlignedBatch, Delivery]]) -> bool:
        """Apply a whole batch; if that fails, hand every chunk back (False). A full disk stops the run in one line
        (exit 3; the learner takes nothing more, --resume goes on from the last checkpoint); another failure that
        is not the bus's ends this actor, so the node exits 1 and a supervisor restarts it to resume from KV."""
        if self.halted:  # its weights may be ahead of what is saved: nothing more is applied in this process
            for _, delivery in held:
                delivery.nak(delay_s=1.0)
            return False
        self.stepped = False
        try:
            self._apply(batch_id, held)
            return True
        except Exception as exc:
            for _, delivery in held:
                delivery.nak(delay_s=1.0)
            # After the optimizer step nothing may retry in this process (it would apply the batch twice):
            # the restarted learner resumes from its checkpoint or KV record instead.
            full = _disk_full_in(exc)
            if full is not None:  # a full disk is the operator's to fix: the run stops in one line, --resume goes on
                self.halted = full.strerror or str(full)
                self.log.error("batch could not be saved: the disk is full", batch_id=batch_id, error=full.strerror)
                self.bus.stop_run(f"{self.halted}; free space there and continue with --resume")
            elif self.stepped or not is_transient(exc):
                self.log.error("batch could not be applied", batch_id=batch_id, error=f"{type(exc).__name__}: {exc}")
                self.actor_ref.tell(_Fatal(f"{type(exc).__name__}: {exc}"))
            else:
                self.log.warning("batch handed back after a passing failure", batch_id=batch_id, error=str(exc))
            return False

    def _write_version(self, step: int, version: int) -> WrittenVersion:
        """The new weights as the next version's file (and as an HF export where one is due)."""
        state = self.trainer.full_state_dict()
        written = self.weights.write(state, version, self.scratch / f"v{version}.safetensors")
        if step + 1 in self.cfg.export_steps(self.config.pipeline.steps):
            export_hf(self.trainer.module, state, self.tokenizer, self.exports / f"step{step + 1}")
        return written

    def _after_step(self, what: str, write: Callable[[], T]) -> T:
        return write_after_step(write, what, self.log)

    def on_note(self, note: Any) -> Any:
        if isinstance(note, _Fatal):
            raise RuntimeError(f"{self.side} learner cannot apply its batch: {note.error}")
        return super().on_note(note)

    def _apply(self, batch_id: str, held: list[tuple[AlignedBatch, Delivery]]) -> None:
        batch = join_chunks([c for c, _ in held])
        if self._refused(batch, held):
            return
        pipeline = self.config.pipeline
        # Staleness: 0 in lockstep sync mode (1 for samples the unaligned ablation carried over); up to max_staleness
        # in async mode or with advance_on: batches (controller/cursor.py's version bound); anything staler is
        # dropped and its group renormalised.
        version_now, advantages = self.applied["version"], self.config.algo.advantages
        batch, staleness = drop_stale(batch, version_now, pipeline.max_staleness, advantages)
        # The torch work on the compute thread (runtime/compute.py), the bus work here: a NATS hiccup stalls no engine.
        advantaged = signed_advantages(batch, self.config.algo.objective.advantage_sign)
        stats = on_compute_thread(self.trainer.apply, advantaged)
        self.stepped = True
        version = self.applied["version"] + 1
        written = on_compute_thread(self._write_version, batch.step, version)
        announced = self._after_step(
            "weights",
            lambda: self.store.publish(written.path, version, batch.step, base=written.base, sha256=written.sha256),
        )
        self.log.info(
            "weights published",
            version=version,
            base=written.base,
            mb=round(written.nbytes / 1e6, 3),
            changed=round(written.changed / max(1, written.elements), 6),
        )
        self._after_step("weights version", lambda: self.versions.put(latest_key(self.side), encode(announced)))
        self.bus.publish(self.bus.subjects.weights(self.side), announced)
        self.applied = next_record(self.applied, batch.step, batch_id, version)
        self._after_step(
            "learner record", lambda: self.state.put(f"learner.{self.side}", json.dumps(self.applied).encode())
        )
        self.acks.hold(delivery for _, delivery in held)
        if self.acks.due(applied_count(self.applied)):
            if self.acks.every:
                on_compute_thread(
                    self.checkpoints.save, self.trainer, self.tokenizer, f"step{batch.step}", self.applied
                )
            for delivery in self.acks.release():
                delivery.ack()
        self.consumed.after_step()  # batches acked at checkpoints long enough ago go (runtime/retention.py)
        figures = {**stats.as_dict(), **staleness.as_dict()}
        # The figures go out before StepDone: whoever shows the step finished has the learner's figures.
        publish_metrics(self.bus, f"{self.side}_learner", {**figures, "version": version}, batch.step, self.role)
        publish_event(
            self.bus,
            f"{self.side}.learned",
            f"{self.side} learner applied step {batch.step}: version {version}, loss {stats.loss:.4f}",
            self.role,
            step=batch.step,
            version=version,
            **figures,
        )
        done = StepDone(
            run_id=self.bus.run_id,
            side=self.side,
            step=batch.step,
            batch_id=batch_id,
            version=version,
            loss=stats.loss,
            stats=figures,
            duration_s=stats.seconds,
        )
        # A sub-agent type's crosses into MAIN, to the controller (deploy/accounts.py).
        self._after_step(
            "step done",
            lambda: publish_crossing(
                self.bus, self.bus.subjects.step_done(self.side), done, f"done-{batch_id}", crosses=self.side != "main"
            ),
        )


def start_main_learner(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """The main agent's learner (one per run; several ranks come with a launcher)."""
    started.append(LearnerActor.start_ready(bus, config, "main", timeout_s=600))


def start_sub_learner(bus: Bus, config: NodeConfig, started: list[Any], sub_type: str = DEFAULT_SUB_TYPE) -> None:
    """The learner of sub-agent type `sub_type` (one per type per run), unless the type does not train (frozen, or
    main-only: the node's check refuses a sub-learner role whose types none train)."""
    if config.trains(sub_type):
        started.append(LearnerActor.start_ready(bus, config, sub_type, timeout_s=600))


def _disk_full_in(exc: BaseException) -> DiskFullError | None:
    """The DiskFullError that `exc` is or was raised from, if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, DiskFullError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
