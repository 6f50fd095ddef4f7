"""Request/reply calls from agents to other actors (tools, sub-agents) with explicit timeouts and a
bounded retry, all of a batch in flight at once, and counted (docs/architecture.md §One training step: "Timeouts
and retries are explicit").

The sending and resending is the runtime's (runtime/retry.py: a call that timed out, found nobody
listening, or reached an actor that had just stopped is sent again, at most `retries` more times);
whatever still fails is returned as the error, never raised, so the caller turns it into an error the
agent reads (docs/architecture.md §Errors). Here the calls are counted per kind for the metrics.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from mgrpo_actors.runtime.retry import CallOutcome, request_all

__all__ = ["CallOutcome", "CallStats", "request_all"]


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
