"""The pipeline's durable JetStream consumers, declared once: the actors pull from them
(`DurableSpec.where`), the roles' NATS users may only bind to, pull from and ack them (actors/roles.py,
deploy/access.py), and `mgrpo deploy provision` makes them as the account's admin beforehand. No role
may create or update a consumer: nats-server does not check a consumer's delivery subject against its
creator's permissions, so a user that may create one can have the server deliver a stream's messages
onto any subject of its account (measured: a forged message delivered into a batch stream). Where
nobody provisions (an embedded or unsecured server) the node makes them itself, with the same settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocols import Subjects

__all__ = ["DURABLES", "WORK_DURABLES", "DurableSpec"]


@dataclass(frozen=True)
class DurableSpec:
    """One durable pull consumer (explicit ack; its ack wait is pipeline.ack_wait_s)."""

    stream: str  # the stream's short name (Subjects.stream)
    name: str  # the durable's name
    filter: str = ""  # the subject it takes, relative to mgrpo.<run>. ("" = the whole stream)
    max_ack_pending: int = 256  # deliveries unacked at once, at most (the runtime's default)

    def where(self, subjects: Subjects) -> tuple[str, str, str | None]:
        """(stream name, durable name, filter subject or None) for Bus.consume in run `subjects`."""
        return subjects.stream(self.stream), self.name, f"{subjects.root}.{self.filter}" if self.filter else None


def _spec(*args: object, **kwargs: object) -> tuple[str, DurableSpec]:
    spec = DurableSpec(*args, **kwargs)  # type: ignore[arg-type]
    return spec.name, spec


# Aligners hold a whole step's pieces unacked until the step's batch is published; a learner holds a
# batch's chunks until the step is applied: hence their large max_ack_pending.
DURABLES: dict[str, DurableSpec] = dict(
    [
        # step.aligned.<side> and step.done.<side>, not its own step.start
        _spec("steps", "controller", filter="step.*.*"),
        _spec("rollouts", "main-agents"),
        _spec("steps", "main-aligner-plans", filter="step.start", max_ack_pending=100_000),
        _spec("traj-main", "main-aligner", max_ack_pending=100_000),
        _spec("steps", "sub-aligner-plans", filter="step.start", max_ack_pending=100_000),
        _spec("stats", "sub-aligner-stats", max_ack_pending=100_000),
        _spec("traj-sub", "sub-aligner", max_ack_pending=100_000),
        _spec("batch-main", "main-learner", max_ack_pending=10_000),
        _spec("batch-sub", "sub-learner", max_ack_pending=10_000),
    ]
)

# The durables that alone read their stream, whose acknowledged messages are done with (a trajectory whose batch
# is out, a batch a checkpoint holds, a reward report used): their owner removes those from the stream
# nats.keep_consumed_steps steps later (mgrpo_actors/runtime/retention.py).
WORK_DURABLES = ("main-aligner", "sub-aligner", "sub-aligner-stats", "main-learner", "sub-learner")
