"""Requests sent again when another instance may answer (issue 8, finding 5), for the pipeline's calls
and for any client of the bus.

A request that timed out, found nobody listening, or reached an actor that was stopping is sent again,
at most `retries` more times: NATS picks a queue-group member anew each time, and a killed process
has left the group. What still fails comes back as the error of its last attempt, never raised, so a
caller decides what a lost call means (the agents turn it into an error the model reads).

"No responders" comes back at once, typically while a node is reconnecting (it subscribes again right
after its reconnect, ~`nats.reconnect_wait_s` later). Resending at once would spend the whole budget
within milliseconds, so such a call is sent again after a pause (NO_RESPONDERS_BACKOFF_S, doubled each
time up to NO_RESPONDERS_MAX_WAIT_S) as the same attempt, for up to NO_RESPONDERS_PATIENCE_S (or the
call's timeout, if shorter); then that attempt counts as failed. A call with nobody listening at all
therefore fails after (retries + 1) · that patience, not after its full timeouts.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mgrpo_actors.runtime.actor import UNAVAILABLE
from mgrpo_actors.runtime.bus import Bus
from mgrpo_actors.runtime.errors import BusError, NoResponders, RemoteFailure, RequestTimeout
from protocols import Message, ProtocolError

__all__ = [
    "NO_RESPONDERS_BACKOFF_S",
    "NO_RESPONDERS_MAX_WAIT_S",
    "NO_RESPONDERS_PATIENCE_S",
    "RETRYABLE_FAILURES",
    "CallOutcome",
    "is_retryable",
    "no_responders_wait_s",
    "request_all",
    "request_retrying",
]

# Remote failures another instance may not have: the actor stopped between taking the request and
# answering (its node is stopping), its bus failed for a moment, or its batch failed (e.g. its engine).
RETRYABLE_FAILURES = ("ActorStopped", UNAVAILABLE, "BatchFailed")

# Pauses before resending a request nobody was listening for: 0.25, 0.5, 1, 1, ... s, for at most
# 5 s per attempt: a node's reconnect (nats.reconnect_wait_s = 1 s, then a handshake) fits with room.
NO_RESPONDERS_BACKOFF_S = 0.25
NO_RESPONDERS_MAX_WAIT_S = 1.0
NO_RESPONDERS_PATIENCE_S = 5.0


@dataclass
class CallOutcome:
    """How one call ended: the reply, or the error of its last attempt."""

    reply: Message | None
    error: str | None
    attempts: int  # attempts made (1 + retries used): a resend after "no responders" is not a new attempt
    seconds: float
    sends: int = 0  # times the request was sent ("no responders" resends included)


def is_retryable(exc: BaseException) -> bool:
    """Whether another attempt (maybe on another instance) may succeed where this one failed."""
    if isinstance(exc, (RequestTimeout, NoResponders)):
        return True
    return isinstance(exc, RemoteFailure) and exc.error_type in RETRYABLE_FAILURES


def no_responders_wait_s(resends: int) -> float:
    """Pause before resending a call that found nobody listening `resends` times in a row before (0, 1, ...)."""
    return min(NO_RESPONDERS_MAX_WAIT_S, NO_RESPONDERS_BACKOFF_S * 2**resends)


def request_all(
    bus: Bus, subjects: Sequence[str], make_request: Callable[[int, int], Message], timeout_s: float, retries: int
) -> list[CallOutcome]:
    """Send call i to subjects[i] as `make_request(i, attempt)` (attempt 0, 1, …, at most `retries`),
    all calls in flight at once, resending those that may succeed elsewhere; one outcome per call, in
    order. Each call is handled as soon as its own reply or error comes (a slow call never holds up
    another's resend). A resend after "no responders" keeps its attempt number: nobody received it."""
    started = time.perf_counter()
    n = len(subjects)
    outcomes: list[CallOutcome | None] = [None] * n
    attempt, sends, quiet = [0] * n, [0] * n, [0] * n  # quiet: "no responders" in a row within the attempt
    attempt_began = [started] * n
    patience_s = min(timeout_s, NO_RESPONDERS_PATIENCE_S)
    in_flight: dict[concurrent.futures.Future, int] = {}
    resends: list[tuple[float, int]] = []  # (when, call), a heap

    def send(i: int) -> None:
        sends[i] += 1
        in_flight[bus.request_future(subjects[i], make_request(i, attempt[i]), timeout_s)] = i

    for i in range(n):
        send(i)
    while in_flight or resends:
        while resends and resends[0][0] <= time.perf_counter():
            send(heapq.heappop(resends)[1])
        next_resend_s = max(0.0, resends[0][0] - time.perf_counter()) if resends else None
        if not in_flight:
            time.sleep(next_resend_s or 0.0)
            continue
        done, _ = concurrent.futures.wait(
            in_flight, timeout=next_resend_s, return_when=concurrent.futures.FIRST_COMPLETED
        )
        for future in done:
            i = in_flight.pop(future)
            try:
                outcomes[i] = CallOutcome(
                    future.result(), None, attempt[i] + 1, time.perf_counter() - started, sends[i]
                )
                continue
            except (BusError, ProtocolError) as exc:
                error = exc
            now = time.perf_counter()
            patience_left = attempt_began[i] + patience_s - now
            if isinstance(error, NoResponders) and patience_left > 0.01:
                pause = min(no_responders_wait_s(quiet[i]), patience_left)
                quiet[i] += 1  # the same attempt, sent again once a node may have (re)subscribed
            elif is_retryable(error) and attempt[i] < retries:
                attempt[i], quiet[i], attempt_began[i], pause = attempt[i] + 1, 0, now, 0.0
            else:
                outcomes[i] = CallOutcome(None, str(error), attempt[i] + 1, now - started, sends[i])
                continue
            heapq.heappush(resends, (now + pause, i))
    return [outcome for outcome in outcomes if outcome is not None]


def request_retrying(
    bus: Bus, subject: str, message: Message, timeout_s: float | None = None, retries: int = 2
) -> CallOutcome:
    """One request with `request_all`'s retries (timeout default: the bus's request_timeout_s)."""
    timeout_s = bus.request_timeout_s if timeout_s is None else timeout_s
    return request_all(bus, [subject], lambda _i, _attempt: message, timeout_s, retries)[0]
