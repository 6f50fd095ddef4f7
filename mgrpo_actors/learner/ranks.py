"""A learner with several ranks (torchrun / deepspeed launcher; docs/architecture.md §Engines: "rank 0 talks to NATS").

Only rank 0 is on the bus: it joins a batch's chunks, publishes weights, writes KV and acks. The other
ranks ("followers") never connect to NATS; they hold a copy of the model under the same DeepSpeed
engine and take part in every collective call rank 0 makes, in the same order, or ZeRO's reductions,
gathers and checkpoint barriers would hang. So rank 0's trainer announces each such call on a channel
first (`lead`), and a follower does what it is told (`follow`):

    apply       the whole joined batch (each rank trains on its own shard of it, trainer.py)
    state       full_state_dict() (ZeRO-3 gathers the partitioned weights collectively)
    checkpoint  save_checkpoint(directory, tag, client state) (each rank writes its ZeRO partition)
    stop        rank 0's learner stopped: exit 0

Gradients never leave the learner's own ranks: they are reduced inside its process group only. The
channel is a gloo group of its own (it carries Python objects whatever the training backend) with a
long timeout, since a follower may wait hours for the next step's batch. Start-up is mirrored without
commands: both build the engine (DeepSpeed broadcasts rank 0's weights, e.g. those a restarted rank 0
resumed from), load the newest checkpoint if there is one, then open the channel.
"""

from __future__ import annotations

import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.learner.checkpoints import Checkpoints
from mgrpo_actors.learner.trainer import CMD_APPLY, CMD_CHECKPOINT, CMD_STATE, PolicyTrainer
from mgrpo_actors.log import get_logger
from protocols import AlignedBatch, decode, encode

__all__ = [
    "CMD_APPLY",
    "CMD_CHECKPOINT",
    "CMD_STATE",
    "CMD_STOP",
    "RankChannel",
    "follow",
    "lead",
    "run_follower",
    "stop_followers",
]

log = get_logger(__name__)

CMD_STOP = "stop"  # besides the trainer's own announcements (CMD_APPLY, CMD_STATE, CMD_CHECKPOINT)
_WAIT = timedelta(days=30)  # a follower waits this long for rank 0's next command (rollouts take long)
_NO_LIMIT = 1 << 40  # a joined batch may outgrow one NATS message: the channel has no such cap


class RankChannel:
    """Rank 0's commands to the learner's other ranks; every rank must create it at the same point."""

    def __init__(self, timeout: timedelta = _WAIT) -> None:
        self.group = dist.new_group(backend="gloo", timeout=timeout)

    def send(self, kind: str, payload: Any = None) -> None:
        """On rank 0: tell every follower what to do next (a batch travels as its wire encoding)."""
        wire = encode(payload, max_bytes=_NO_LIMIT) if isinstance(payload, AlignedBatch) else payload
        dist.broadcast_object_list([(kind, wire)], src=0, group=self.group)

    def receive(self) -> tuple[str, Any]:
        """On a follower: wait for rank 0's next command."""
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=self.group)
        kind, payload = box[0]
        return kind, decode(payload, max_bytes=_NO_LIMIT) if kind == CMD_APPLY else payload


def lead(trainer: PolicyTrainer) -> RankChannel | None:
    """On rank 0 of a learner with several ranks: open the channel (collective) and make `trainer`
    announce each collective call on it. None with one rank."""
    if trainer.world_size == 1:
        return None
    if trainer.rank != 0:
        raise ValueError(f"rank {trainer.rank} follows; only rank 0 leads (and talks to NATS)")
    channel = RankChannel()
    trainer.announce = channel.send
    log.info("learner leads its ranks", world_size=trainer.world_size)
    return channel


def stop_followers(trainer: PolicyTrainer | None) -> None:
    """On rank 0 as its learner stops: the followers exit (a failure to reach them is only logged)."""
    if trainer is None or trainer.announce is None:
        return
    announce, trainer.announce = trainer.announce, None
    try:
        announce(CMD_STOP, None)
    except Exception as exc:  # a follower already gone: the launcher ends the rest
        log.warning("could not tell the learner's other ranks to stop", error=f"{type(exc).__name__}: {exc}")


def follow(trainer: PolicyTrainer, channel: RankChannel) -> int:
    """A follower's loop: do what rank 0 announces until it says stop. Returns the batches applied."""
    applied = 0
    while True:
        kind, payload = channel.receive()
        if kind == CMD_APPLY:
            stats = trainer.apply(payload)
            applied += 1
            log.debug("follower applied a batch", step=payload.step, samples=stats.samples)
        elif kind == CMD_STATE:
            trainer.full_state_dict()
        elif kind == CMD_CHECKPOINT:
            trainer.save_checkpoint(*payload)
        elif kind == CMD_STOP:
            return applied
        else:
            raise ValueError(f"unknown command from rank 0: {kind!r}")


def run_follower(config: NodeConfig, side: str) -> int:
    """The whole life of rank > 0 of `side`'s learner (`mgrpo-node --role <side>-learner` under a
    launcher): the same model and engine as rank 0, the same checkpoint, then `follow`. Returns 0.

    SIGINT/SIGTERM are ignored: the launcher signals every rank, rank 0 stops its learner gracefully
    and then says stop, so a follower never leaves in the middle of a collective call (a checkpoint
    with a missing partition); the launcher kills it if rank 0 is gone.
    """
    from mgrpo_actors.models.loader import load_model  # transformers: only here, not for the channel

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    # torch threads: learners.<side>.torch_threads, set by the trainer while it applies a batch
    model, tokenizer = load_model(config.agent(side).model)
    trainer = PolicyTrainer(model, tokenizer.pad_token_id, config.learner(side), config.algo.objective)
    Checkpoints(Path(config.run.dir) / config.run.id / "checkpoints" / side).load(trainer)
    channel = RankChannel()
    log.info("learner rank follows rank 0", side=side, rank=dist.get_rank(), world_size=trainer.world_size)
    applied = follow(trainer, channel)
    log.info("learner rank stopped", side=side, rank=dist.get_rank(), applied=applied)
    return 0
