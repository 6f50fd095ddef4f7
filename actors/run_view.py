"""`mgrpo run`'s live view: one line per event of the run as it happens (built from what the run
publishes on NATS: events and query progress), and a per-step summary table at the end."""

from __future__ import annotations

import threading
from typing import Any

from rich.console import Console
from rich.table import Table

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.runtime import Bus, Delivery
from protocols import Event, ProtocolError, QueryDone, decode

__all__ = ["RunView"]


class RunView:
    """Prints the run's progress; `attach(bus)` subscribes it (callbacks run on the bus thread: print only)."""

    def __init__(self, console: Console, config: NodeConfig) -> None:
        self.console = console
        self.config = config
        self.steps: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def attach(self, bus: Bus) -> None:
        bus.subscribe(bus.subjects.events, self._on_message)
        bus.subscribe(bus.subjects.rollout_done, self._on_message)

    def _on_message(self, delivery: Delivery) -> None:
        try:
            message = decode(delivery.data)
        except ProtocolError:
            return
        with self._lock:
            if isinstance(message, QueryDone):
                self._query_done(message)
            elif isinstance(message, Event):
                self._event(message)

    def _query_done(self, done: QueryDone) -> None:
        failed = f", {done.failed_rollouts} failed" if done.failed_rollouts else ""
        self.console.print(f"  query {done.query_id}: {done.num_rollouts} rollouts, {done.sub_calls} sub calls{failed} ({done.seconds:.1f} s)")

    def _event(self, event: Event) -> None:
        data = event.data
        step = data.get("step")
        if event.kind == "step.started":
            self.console.rule(f"step {step}")
            self.console.print(event.message)
        elif event.kind in ("main.batch", "sub.batch"):
            side = event.kind.split(".")[0]
            self.steps.setdefault(step, {})[side] = data
            self.console.print(_batch_line(side, data))
        elif event.kind in ("main.learned", "sub.learned"):
            side = event.kind.split(".")[0]
            self.steps.setdefault(step, {})[f"{side}_learner"] = data
            self.console.print(f"  {side} learner: version {data.get('version')}, loss {_f(data.get('loss'), 4)}, clip fraction "
                               f"{_f(data.get('clip_fraction'))}, {_i(data.get('samples'))} samples, {_f(data.get('seconds'), 1)} s")  # fmt: skip
        elif event.kind == "step.finished":
            self.steps.setdefault(step, {})["seconds"] = data.get("seconds", 0.0)
            self.console.print(f"[bold]{event.message}[/bold]")
        elif event.kind == "run.finished":
            self.console.print(f"[bold]{event.message}[/bold]")
        elif event.level in ("warning", "error"):
            self.console.print(f"[{event.level}] {event.message}")

    def summary(self, seconds: float) -> None:
        """The per-step table and the run's wall time."""
        table = Table(title=f"run {self.config.run.id!r}: {len(self.steps)} steps in {seconds:.1f} s")
        for column in ("step", "R_M", "M correct", "R_S", "D", "d_k", "dup/ph/drop", "loss M / S", "version M / S", "seconds"):
            table.add_column(column, justify="right")
        for step in sorted(self.steps):
            row = self.steps[step]
            main, sub = row.get("main", {}), row.get("sub", {})
            main_learner, sub_learner = row.get("main_learner", {}), row.get("sub_learner", {})
            table.add_row(
                str(step), _f(main.get("reward_mean")), _f(main.get("r_correct_mean")), _f(sub.get("reward_mean")), _i(sub.get("d")),
                _f(sub.get("dk_mean"), 2), f"{_i(sub.get('duplicates'))}/{_i(sub.get('placeholders'))}/{_i(sub.get('dropped'))}",
                f"{_f(main_learner.get('loss'), 4)} / {_f(sub_learner.get('loss'), 4)}",
                f"{_i(main_learner.get('version'))} / {_i(sub_learner.get('version'))}", _f(row.get("seconds"), 1),
            )  # fmt: skip
        self.console.print(table)


def _f(value: Any, digits: int = 3) -> str:
    return "" if value is None else f"{float(value):.{digits}f}"


def _i(value: Any) -> str:
    return "" if value is None else str(int(value))


def _batch_line(side: str, data: dict[str, Any]) -> str:
    if side == "main":
        return (f"  main batch: {_i(data.get('samples'))} samples, R_M mean {_f(data.get('reward_mean'))}, "
                f"correct {_f(data.get('r_correct_mean'))}, format ok {_f(data.get('format_ok_rate'))}, failed {_i(data.get('failed'))}")  # fmt: skip
    return (f"  sub batch: {_i(data.get('samples'))} samples (D = {_i(data.get('d'))}), R_S mean {_f(data.get('reward_mean'))} over "
            f"{_i(data.get('calls'))} calls, d_k mean {_f(data.get('dk_mean'))}, duplicates {_i(data.get('duplicates'))}, "
            f"placeholders {_i(data.get('placeholders'))}, dropped {_i(data.get('dropped'))}")  # fmt: skip
