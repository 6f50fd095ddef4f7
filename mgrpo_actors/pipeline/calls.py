"""Request/reply calls from agents to other actors (tools, sub-agents) with explicit timeouts and a
bounded retry, all of a batch in flight at once, and counted (design.md §One training step: "Timeouts
and retries are explicit").

A call that timed out, found nobody listening, or reached an actor that had just stopped is sent
again (NATS picks a queue-group member anew, and a killed process has left the group), at most
`retries` more times. Whatever still fails is returned as the error, never raised, so the caller
turns it into an error the agent reads (design.md §Errors).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mgrpo_actors.runtime import UNAVAILABLE, Bus, BusError, NoResponders, RemoteFailure, RequestTimeout
from protocols import Message, ProtocolError

__all__ = ["RETRYABLE_FAILURES", "CallOutcome", "CallStats", "request_all"]


@dataclass
class CallOutcome:
    """How one call ended: the reply, or the error of its last attempt."""

    reply: Message | None
    error: str | None
    attempts: int
    seconds: float


@dataclass
class CallStats:
    """Counts per call kind (a tool name, or "subtask") since the last `take()`, for metrics."""

    calls: Counter = field(default_factory=Counter)
    retries: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)
    seconds: defaultdict = field(default_factory=lambda: defaultdict(list))

    def record(self, kind: str, outcome: CallOutcome) -> None:
        self.calls[kind] += 1
        self.retries[kind] += outcome.attempts - 1
        self.failures[kind] += outcome.reply is None
        self.seconds[kind].append(outcome.seconds)

    def take(self) -> dict[str, float]:
        """Flat figures ("<kind>.calls", ".retries", ".failures", ".latency_ms_mean", ".latency_ms_max"), then reset."""
        figures: dict[str, float] = {}
        for kind in sorted(self.calls):
            seconds = self.seconds[kind]
            figures[f"{kind}.calls"] = float(self.calls[kind])
            figures[f"{kind}.retries"] = float(self.retries[kind])
            figures[f"{kind}.failures"] = float(self.failures[kind])
            figures[f"{kind}.latency_ms_mean"] = 1e3 * sum(seconds) / len(seconds)
            figures[f"{kind}.latency_ms_max"] = 1e3 * max(seconds)
        self.calls, self.retries, self.failures = Counter(), Counter(), Counter()
        self.seconds = defaultdict(list)
        return figures


# Remote failures another instance may not have: the actor stopped between taking the request and
# answering (its node is stopping), its bus failed for a moment, or its batch failed (e.g. its engine).
RETRYABLE_FAILURES = ("ActorStopped", UNAVAILABLE, "BatchFailed")


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (RequestTimeout, NoResponders)):
        return True
    return isinstance(exc, RemoteFailure) and exc.error_type in RETRYABLE_FAILURES


def request_all(
    bus: Bus, subjects: Sequence[str], make_request: Callable[[int, int], Message], timeout_s: float, retries: int
) -> list[CallOutcome]:
    """Send call i to subjects[i] as `make_request(i, attempt)` (attempt 0, 1, …), all calls in flight
    at once, retrying those that may succeed elsewhere; one outcome per call, in order."""
    started = time.perf_counter()
    outcomes: list[CallOutcome | None] = [None] * len(subjects)
    pending = list(range(len(subjects)))
    for attempt in range(retries + 1):
        futures = [(i, bus.request_future(subjects[i], make_request(i, attempt), timeout_s)) for i in pending]
        pending = []
        for i, future in futures:
            try:
                outcomes[i] = CallOutcome(future.result(), None, attempt + 1, time.perf_counter() - started)
            except (BusError, ProtocolError) as exc:
                if _retryable(exc) and attempt < retries:
                    pending.append(i)
                else:
                    outcomes[i] = CallOutcome(None, str(exc), attempt + 1, time.perf_counter() - started)
        if not pending:
            break
    return [outcome for outcome in outcomes if outcome is not None]
