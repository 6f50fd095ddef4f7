"""Where the monitor role sends what it reads off the run's metrics stream besides its terminal view
(`monitor` section of the node config): a Prometheus endpoint (`prometheus-client`) and TensorBoard
event files (`torch.utils.tensorboard`). Both take every message of the stream, decoded once by the
caller; metrics keep the names they have on NATS (`main.reward_mean` is the Prometheus gauge
`mgrpo_main_reward_mean` and the TensorBoard scalar `main/reward_mean`), events are counted by kind.
The Grafana dashboard in deploy/grafana/ reads the Prometheus side.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Protocol

from protocols import Event, Message, Metric

__all__ = [
    "SINGLETON_ROLES",
    "Exporter",
    "PrometheusExporter",
    "TensorBoardExporter",
    "exporters_for",
    "prometheus_name",
    "scalar_tag",
    "tags_text",
]


class Exporter(Protocol):
    """Takes the run's messages one by one; closed when the monitor stops."""

    where: str  # for the monitor's output: where the exports go

    def observe(self, message: Message) -> None: ...

    def close(self) -> None: ...


# Roles with one process per run: their metrics need no node to tell samples apart (agents and tools scale out).
SINGLETON_ROLES = ("controller", "main-aligner", "sub-aligner", "main-learner", "sub-learner")


def tags_text(tags: dict[str, str]) -> str:
    """A sample's tags as one stable string ("dk=3"), "" without tags."""
    return ",".join(f"{key}={tags[key]}" for key in sorted(tags))


def scalar_tag(metric: Metric) -> str:
    """A metric's TensorBoard tag: `main.reward_mean` -> `main/reward_mean`, then its tags, then, for a role that
    scales out (agents, tools), its node."""
    tag = metric.name.replace(".", "/", 1)
    if metric.tags:
        tag = f"{tag}/{tags_text(metric.tags)}"
    # each side's aligner and learner (a sub-agent type's learner role is "<type>-learner") is one per run too
    if metric.role not in SINGLETON_ROLES and not metric.role.endswith(("-aligner", "-learner")):
        tag = f"{tag}/{metric.node}"
    return tag


def prometheus_name(metric: str) -> str:
    """`main.reward_mean` -> `mgrpo_main_reward_mean` (Prometheus allows [a-zA-Z0-9_:] only)."""
    return "mgrpo_" + re.sub(r"[^a-zA-Z0-9_]", "_", metric)


class PrometheusExporter:
    """Serves the newest value of every metric of the run (a gauge per metric name, labelled with run,
    node, role and the sample's tags, e.g. `sub.dk_hist{tags="dk=3"}`; the gauge `mgrpo_step` is the
    step of the newest sample) and a counter of events by kind and level, at http://<addr>:<port>/metrics."""

    def __init__(self, run_id: str, port: int, addr: str = "0.0.0.0") -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        self.run_id = run_id
        self.registry = CollectorRegistry()
        self._gauge_class = Gauge
        self._gauges: dict[str, Any] = {}
        self._events = Counter(
            "mgrpo_events", "events of the run by kind and level", ["run", "kind", "level"], registry=self.registry
        )
        self._step = Gauge("mgrpo_step", "step of the newest metric sample", ["run"], registry=self.registry)
        self._newest_step = 0
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = self._server.server_port  # the port it got (port 0: a free one)
        self.where = f"Prometheus at http://{addr}:{self.port}/metrics"

    def observe(self, message: Message) -> None:
        if isinstance(message, Metric):
            name = prometheus_name(message.name)
            gauge = self._gauges.get(name)
            if gauge is None:
                gauge = self._gauges[name] = self._gauge_class(
                    name, f"mgrpo metric {message.name}", ["run", "node", "role", "tags"], registry=self.registry
                )
            gauge.labels(self.run_id, message.node, message.role, tags_text(message.tags)).set(message.value)
            self._newest_step = max(self._newest_step, message.step)
            self._step.labels(self.run_id).set(self._newest_step)
        elif isinstance(message, Event):
            self._events.labels(self.run_id, message.kind, message.level).inc()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class TensorBoardExporter:
    """Writes every metric as a TensorBoard scalar (`main.reward_mean` -> `main/reward_mean`, x = its
    step; a sample's tags and, for roles that scale out, its node extend the name) into a directory of
    its own under `logdir` per monitor start (`<run>-<UTC time>`): a restarted monitor replays the
    run from its start, and its curves must not overlay the earlier ones."""

    def __init__(self, logdir: str, run_id: str = "run") -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.logdir = Path(logdir) / f"{run_id}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        self.writer = SummaryWriter(log_dir=str(self.logdir))
        self.where = f"TensorBoard event files in {self.logdir}"

    def observe(self, message: Message) -> None:
        if not isinstance(message, Metric):
            return
        self.writer.add_scalar(scalar_tag(message), message.value, global_step=message.step)

    def close(self) -> None:
        self.writer.close()


def exporters_for(run_id: str, config: Any) -> list[Exporter]:
    """The exporters a `monitor` config section asks for (config/node.py MonitorConfig)."""
    exporters: list[Exporter] = []
    if config.prometheus_port:
        exporters.append(PrometheusExporter(run_id, config.prometheus_port, config.prometheus_addr))
    if config.tensorboard_dir:
        exporters.append(TensorBoardExporter(config.tensorboard_dir, run_id))
    return exporters
