"""Messages nats-py dropped because a subscription's pending queue was full (a slow consumer): never
silent. Each drop is counted per subject; the first of a subject and then every `log_every`-th are
logged; the running total goes out as the metric `bus.slow_consumer_drops` (at most once a second),
so `mgrpo tap`, the monitor and a dashboard see them."""

from __future__ import annotations

import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mgrpo_actors.log import get_logger
from protocols import Metric

__all__ = ["SLOW_CONSUMER_METRIC", "SlowConsumers"]

log = get_logger("mgrpo_actors.runtime.bus")

SLOW_CONSUMER_METRIC = "bus.slow_consumer_drops"


class SlowConsumers:
    """The slow-consumer drops of one bus (called on the bus thread)."""

    def __init__(
        self,
        node: str,
        publish_metric: Callable[[Metric], Awaitable[None]],
        log_every: int = 100,
        metric_every_s: float = 1.0,
    ) -> None:
        self.node = node
        self.drops: collections.Counter[str] = collections.Counter()
        self._publish_metric = publish_metric
        self._log_every = log_every
        self._metric_every_s = metric_every_s
        self._metric_sent_at = -float("inf")

    @property
    def total(self) -> int:
        return sum(self.drops.values())

    async def record(self, exc: Any) -> None:
        """One nats.errors.SlowConsumerError: a message of `exc.subject` was dropped."""
        subject = str(getattr(exc, "subject", "") or "?")
        self.drops[subject] += 1
        if self.drops[subject] % self._log_every == 1 or self._log_every == 1:
            log.warning(
                "slow consumer: nats dropped messages of a subscription whose queue was full",
                subject=subject,
                dropped=self.drops[subject],
                total=self.total,
            )
        now = time.monotonic()
        if now - self._metric_sent_at >= self._metric_every_s:
            self._metric_sent_at = now
            try:
                await self._publish_metric(
                    Metric(
                        name=SLOW_CONSUMER_METRIC,
                        value=float(self.total),
                        node=self.node,
                        role="bus",
                        tags={"subject": subject[:200]},
                    )
                )
            except Exception as exc2:  # reporting must never take the bus down
                log.warning("slow-consumer metric not sent", error=f"{type(exc2).__name__}: {exc2}")
