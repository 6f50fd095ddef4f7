"""Metrics and events on the bus (`mgrpo.<run>.metrics.<name>`, `mgrpo.<run>.events`), captured by the
run's metrics stream, visible with `mgrpo tap` and replayable by a monitor that attaches late."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mgrpo_actors.runtime import Bus
from protocols import Event, Metric

__all__ = ["MONITOR_REPORTED", "RUN_FINISHED", "publish_event", "publish_metrics"]

# Event kinds others act on (nodes with --until-finished stop on them).
RUN_FINISHED = "run.finished"  # the controller: the run's last step is finished
MONITOR_REPORTED = "monitor.reported"  # a monitor: it has shown the finished run and written its report


def publish_metrics(
    bus: Bus, prefix: str, figures: Mapping[str, float], step: int, role: str, tags: Mapping[str, str] | None = None
) -> None:
    """One Metric per figure, named `<prefix>.<figure>` (e.g. `main.reward_mean`)."""
    for name, value in figures.items():
        metric = Metric(
            name=f"{prefix}.{name}", value=float(value), step=step, node=bus.node, role=role, tags=dict(tags or {})
        )
        bus.publish(bus.subjects.metrics(metric.name), metric)


def publish_event(bus: Bus, kind: str, message: str, role: str, level: str = "info", **data: Any) -> None:
    """An Event for people watching the run."""
    bus.publish(
        bus.subjects.events, Event(kind=kind, message=message, level=level, node=bus.node, role=role, data=data)
    )
