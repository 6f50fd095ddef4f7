"""Tool nodes as real processes for the benches: `mgrpo-node --role tool` subprocesses of this venv,
started together and waited for (each announces `node.started` once all its actors are up), stopped
gracefully (SIGTERM, then SIGKILL after 15 s), with their stderr kept for a report and their memory read
from /proc (Linux)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mgrpo_actors.runtime import Bus, Delivery
from protocols import Event, decode

__all__ = ["START_TIMEOUT_S", "ToolNode", "delay_tool_settings", "start_tool_nodes", "stop_tool_nodes"]

START_TIMEOUT_S = 60.0


def delay_tool_settings(latency_s: float, serve: tuple[str, ...] = ("delay",), actors_per_tool: int = 1) -> list[str]:
    """`--set` arguments for a node serving the `delay` tool (tools/delay.py) with `latency_s`, plus
    whatever else `serve` names, `actors_per_tool` actors each."""
    extra = f'[{{name: delay, factory: "mgrpo_actors.tools.delay:DelayTool", args: {{latency_s: {latency_s}}}}}]'
    return [
        "--set",
        f"tools.actors_per_tool={actors_per_tool}",
        "--set",
        f"tools.serve=[{', '.join(serve)}]",
        "--set",
        f"tools.extra={extra}",
    ]


@dataclass
class ToolNode:
    """One started tool node: its process and the file its stderr (the JSON log) goes to."""

    name: str
    proc: subprocess.Popen
    log: IO[bytes] = field(repr=False)

    def log_text(self, tail: int = 0) -> str:
        self.log.seek(0)
        text = self.log.read().decode(errors="replace")
        return text[-tail:] if tail else text

    def memory_kib(self, key: str) -> int | None:
        """A /proc/PID/status figure in KiB ("VmRSS" now, "VmHWM" the peak so far); None where unreadable."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith(f"{key}:"):
                    return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return None


def _command(url: str, run_id: str, name: str, settings: list[str]) -> list[str]:
    node = Path(sys.executable).parent / "mgrpo-node"
    if not node.exists():
        raise FileNotFoundError(f"{node} not found: run `make install`")
    return [
        str(node),
        "--role",
        "tool",
        "--nats",
        url,
        "--run-id",
        run_id,
        "--name",
        name,
        *settings,
        "--set",
        "log.level=warning",
    ]


def start_tool_nodes(bus: Bus, url: str, names: list[str], settings: list[str]) -> list[ToolNode]:
    """Start one tool node per name at once (node settings as `--set` arguments); return when each has
    announced node.started. A node that exits first, or a start slower than START_TIMEOUT_S, raises
    with its log, after stopping the others."""
    started: set[str] = set()
    lock = threading.Lock()

    def on_event(delivery: Delivery) -> None:  # on the bus thread: quick, no blocking Bus calls
        event = decode(delivery.data)
        if isinstance(event, Event) and event.kind == "node.started":
            with lock:
                started.add(event.node)

    def missing() -> set[str]:
        with lock:
            return set(names) - started

    sub = bus.subscribe(bus.subjects.events, on_event)  # before the nodes start: no announcement is missed
    nodes: list[ToolNode] = []
    try:
        for name in names:
            log = tempfile.TemporaryFile()
            proc = subprocess.Popen(
                _command(url, bus.run_id, name, settings),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            nodes.append(ToolNode(name, proc, log))
        deadline = time.monotonic() + START_TIMEOUT_S
        while missing():
            for node in nodes:
                if node.proc.poll() is not None:
                    raise RuntimeError(
                        f"tool node {node.name} exited with {node.proc.returncode}: {node.log_text(3000)}"
                    )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(missing())} of {len(names)} tool nodes did not start within {START_TIMEOUT_S:g} s"
                )
            time.sleep(0.05)
    except BaseException:
        stop_tool_nodes(nodes)
        raise
    finally:
        sub.stop()
    return nodes


def stop_tool_nodes(nodes: list[ToolNode]) -> None:
    """SIGTERM every node at once (graceful stop), then kill any still running after 15 s."""
    for node in nodes:
        if node.proc.poll() is None:
            node.proc.terminate()
    deadline = time.monotonic() + 15
    for node in nodes:
        try:
            node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            node.proc.kill()
            node.proc.wait()
        node.log.close()
