"""`BusSubtasks`: M's `Delegate` (agents/delegation.py) over NATS: each delegation becomes a
SubtaskRequest to the queue group of its sub-agent type's sub-agents (on that type's subject, naming that
type's policy version), all of a turn batch in flight at once, retried on another instance after a timeout
(calls.py). M reads back only S's SubtaskResult.

A retry carries a new wire call id (`<call id>~<attempt>`) so that a slow first sub-agent that answers
late cannot be mistaken for the one that answered; `answered` records, per M call id, the wire call id
whose trajectory is on the sub side. That is what RewardStats.sub_call_ids lists (d_k).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mgrpo_actors.agents.delegation import ONE_TYPE, Delegates, DelegationRequest
from mgrpo_actors.rollout.calls import CallStats, request_all
from mgrpo_actors.runtime import Bus
from protocols import RolloutRequest, SubtaskRequest, SubtaskResult

__all__ = ["BusSubtasks", "SUBTASK_CALLS", "attempt_of", "wire_call_id"]

SUBTASK_CALLS = "subtask"  # the CallStats kind of subtask calls


def attempt_of(call_id: str) -> str:
    """The query attempt an M call id belongs to (main call ids are "<attempt>.r<k>.t<n>")."""
    return call_id.split(".", 1)[0]


def wire_call_id(call_id: str, attempt: int) -> str:
    """The call id a (re)try travels under: the first try keeps M's call id."""
    return call_id if attempt == 0 else f"{call_id}~{attempt}"


@dataclass(frozen=True)
class Answered:
    """Which wire call answered an M call, and whether S published a trajectory for it."""

    wire_call_id: str
    has_trajectory: bool


class BusSubtasks:
    """A Delegate for the main agents of several queries at once; `requests` maps attempt -> its request.
    sub_versions() gives each sub-agent type's policy version the batch is rolled out with."""

    def __init__(
        self,
        bus: Bus,
        timeout_s: float,
        retries: int,
        stats: CallStats,
        sub_versions: Callable[[], dict[str, int]],
        delegates: Delegates = ONE_TYPE,
    ) -> None:
        self.bus = bus
        self.timeout_s = timeout_s
        self.retries = retries
        self.stats = stats
        self.sub_versions = sub_versions
        self.delegates = delegates  # M's delegate tools, and the sub-agent type each goes to
        self.requests: dict[str, RolloutRequest] = {}
        self.answered: dict[str, Answered] = {}

    def __call__(self, delegations: Sequence[DelegationRequest]) -> list[SubtaskResult]:
        subjects = [self.bus.subjects.subtask_requests_of(d.sub_type) for d in delegations]
        versions = self.sub_versions()

        def request(index: int, attempt: int) -> SubtaskRequest:
            delegation = delegations[index]
            rollout = self.requests[attempt_of(delegation.call_id)]
            return SubtaskRequest(
                run_id=rollout.run_id,
                step=rollout.step,
                query_id=rollout.query_id,
                rollout_index=delegation.rollout_index,
                call_id=wire_call_id(delegation.call_id, attempt),
                task=delegation.task,
                context=delegation.context,
                sub_version=versions.get(delegation.sub_type, 0),
            )

        results = []
        for delegation, outcome in zip(
            delegations, request_all(self.bus, subjects, request, self.timeout_s, self.retries), strict=True
        ):
            self.stats.record(SUBTASK_CALLS, outcome)
            reply = outcome.reply
            if isinstance(reply, SubtaskResult):
                self.answered[delegation.call_id] = Answered(reply.call_id, reply.has_trajectory)
                results.append(dataclasses.replace(reply, call_id=delegation.call_id))
            else:
                error = outcome.error or f"the sub-agent answered with a {type(reply).__name__}"
                tries = f" after {outcome.attempts} attempts" if outcome.attempts > 1 else ""
                results.append(
                    SubtaskResult(
                        call_id=delegation.call_id,
                        ok=False,
                        findings="",
                        error=f"sub-agent unavailable{tries}: {error}",
                        has_trajectory=False,
                    )
                )
        return results
