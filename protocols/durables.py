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

from protocols.subjects import DEFAULT_SUB_TYPE, MAIN_SIDE, Subjects, side_problem, sides_of, stats_stream

__all__ = ["DURABLES", "WORK_DURABLES", "DurableSpec", "durables", "is_work_durable", "work_durables"]


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
def durables(sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)) -> dict[str, DurableSpec]:
    """The durables of a run whose sub-agent types are `sub_types`: per side an aligner's (its plans and its
    trajectories) and a learner's; per sub-agent type its aligner's reward statistics."""
    specs = [
        # step.aligned.<side> and step.done.<side>, not its own step.start
        _spec("steps", "controller", filter="step.*.*"),
        _spec("rollouts", "main-agents"),
    ]
    sides = sides_of(sub_types)
    for side in sides:
        specs.append(_spec("steps", f"{side}-aligner-plans", filter="step.start", max_ack_pending=100_000))
        if side in sub_types:
            specs.append(_spec(stats_stream(side), f"{side}-aligner-stats", max_ack_pending=100_000))
        specs.append(_spec(f"traj-{side}", f"{side}-aligner", max_ack_pending=100_000))
    for side in sides:
        specs.append(_spec(f"batch-{side}", f"{side}-learner", max_ack_pending=10_000))
    return dict(specs)


def work_durables(sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)) -> tuple[str, ...]:
    """The durables that alone read their stream, whose acknowledged messages are done with (a trajectory whose
    batch is out, a batch a checkpoint holds, a reward report used): their owner removes those from the stream
    nats.keep_consumed_steps steps later (mgrpo_actors/runtime/retention.py)."""
    sides = sides_of(sub_types)
    return (
        *(f"{side}-aligner" for side in sides),
        *(f"{t}-aligner-stats" for t in sub_types),
        *(f"{side}-learner" for side in sides),
    )


def is_work_durable(name: str) -> bool:
    """Whether `name` is a work durable (work_durables) of a run with whatever sub-agent types: the side it serves is
    the first part of its name (a type's name holds no "-")."""
    side = name.split("-", 1)[0]
    named_type = side != MAIN_SIDE and side_problem(side) is None
    return name in work_durables((side,) if named_type else (DEFAULT_SUB_TYPE,))


# A run with the one default sub-agent type.
DURABLES: dict[str, DurableSpec] = durables()
WORK_DURABLES = work_durables()
