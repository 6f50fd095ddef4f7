"""`mgrpo-node --role monitor`: the live view of a run (mgrpo_actors/monitoring/run_view.py, what `mgrpo run` shows) for
a run spread over many machines, built only from what it reads off NATS.

It replays the run's metrics stream (`mgrpo-<run>-metrics`: metrics, events, query progress) from the
first message by direct gets (runtime/stream_reader.py: no consumer, no acks: it takes nothing from
anyone and leaves nothing behind), then keeps following it live, so it can attach at any time, even after
the run ended. On `run.finished` it prints the per-step table and writes summary.json and
rewards.png into `<run.dir>/<run.id>/` on its own machine, then publishes a `monitor.reported`
event (with `--until-finished` its node stops on it; otherwise it keeps following).

    mgrpo-node --role monitor --nats nats://host:4222 --run-id r1 [--until-finished]
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.monitoring.exporters import exporters_for
from mgrpo_actors.monitoring.publish import MONITOR_REPORTED, RUN_FINISHED, publish_event
from mgrpo_actors.monitoring.run_view import RunView
from mgrpo_actors.runtime import Bus, BusActor, Delivery, replay_stream
from protocols import ProtocolError, decode

__all__ = ["MonitorActor", "start_monitor"]


class MonitorActor(BusActor):
    """Feeds every message of the run's metrics stream, in stream order, to a RunView."""

    role = "monitor"

    def __init__(self, bus: Bus, config: NodeConfig, console: Console | None = None) -> None:
        super().__init__(bus)
        self.config = config
        self.view = RunView(console or Console(highlight=False), config)
        self.shown = 0

    def on_start(self) -> None:
        super().on_start()
        self.exporters = exporters_for(self.bus.run_id, self.config.monitor)
        for exporter in self.exporters:
            self.view.console.print(f"monitor: exporting to {exporter.where}", markup=False, soft_wrap=True)
        stream = self.bus.subjects.stream("metrics")
        self.view.console.print(
            f"monitor of run {self.bus.run_id!r}: replaying {stream} from its start, then following it live",
            markup=False,
            soft_wrap=True,
        )
        self._subscriptions.append(replay_stream(self.bus, stream, self.actor_ref))

    def on_receive(self, message: Any) -> Any:
        if not isinstance(message, Delivery):
            return super().on_receive(message)
        # Not BusActor's path: a monitor reads only, so nothing it cannot show is dead-lettered or answered.
        try:
            kind = self.view.feed(message.data)
        except Exception as exc:
            self.log.warning("message not shown", subject=message.subject, error=f"{type(exc).__name__}: {exc}")
            return None
        self._export(message.data)
        self.shown += 1
        if kind == RUN_FINISHED:
            self._report()
        return None

    def _export(self, data: bytes) -> None:
        if not self.exporters:
            return
        try:
            decoded = decode(data, self.config.nats.max_message_bytes)
        except ProtocolError:
            return
        for exporter in self.exporters:
            try:
                exporter.observe(decoded)
            except Exception as exc:  # an exporter must never take the view down
                self.log.warning("metric not exported", exporter=exporter.where, error=f"{type(exc).__name__}: {exc}")

    def on_stop(self) -> None:
        for exporter in getattr(self, "exporters", []):
            exporter.close()
        super().on_stop()

    def _report(self) -> None:
        self.view.summary()
        files: list[str] = []
        error = ""
        try:
            files = [str(path) for path in self.view.write_report()]
        except Exception as exc:  # a full disk or a broken plot must not take the view down
            error = f"{type(exc).__name__}: {exc}"
            self.view.console.print(f"run report not written: {error}", markup=False, soft_wrap=True)
        message = f"monitor {self.bus.node} reported run {self.bus.run_id}" + (
            f": {', '.join(files)}" if files else f" (no files: {error})"
        )
        publish_event(self.bus, MONITOR_REPORTED, message, self.role, files=files, error=error)


def start_monitor(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """One monitor (any number of them may watch a run, each with its own view)."""
    started.append(MonitorActor.start_ready(bus, config))
