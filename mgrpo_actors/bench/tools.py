"""`mgrpo bench tools`: does tool throughput scale with the number of tool processes?

The README's promise is "start more `--role tool` processes to add tool throughput": every tool actor,
in any process, joins one queue group per tool, and NATS spreads the requests. This bench checks it
with real processes on one nats-server: for N = 1, 2, 4, 8 it runs N `mgrpo-node --role tool`
subprocesses (adding to those of the previous N) with one actor each (so N servers, each answering one request at a time) serving the
I/O-bound `delay` tool (tools/delay.py: waits LATENCY_S, like a remote search API), keeps a fixed
number of requests in flight (4·N, then 16·N: see LOADS) from one Bus in this process for a fixed
time, and times the replies.

Reported per N and load: requests/s, the ideal N / LATENCY_S, and the scaling ratio throughput(N) /
(N · throughput(1)); the issue's target is a ratio >= 0.9 for every N, checked at 16·N in flight.
The tool sleeps rather than computes, so the ratio measures the bus and the queue group, not the
machine's core count.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.table import Table

from mgrpo_actors.runtime import Bus, Delivery, EmbeddedNats
from protocols import Event, ToolRequest, ToolResult, decode

__all__ = ["LATENCY_S", "LOADS", "PROCESSES", "SATURATED", "TARGET_RATIO", "run"]

PROCESSES = (1, 2, 4, 8)
LATENCY_S = 0.05
# Requests in flight per tool process. NATS hands each request to a random member of the queue
# group, and a node queues what it is given in its actor's mailbox, so with few requests per server
# some servers sit idle while others have a backlog: at 4 per process that costs a few % to ~10 %
# (more with more processes). At 16 per process every server stays busy, which is the capacity the
# target is about; both loads are reported.
LOADS = (4, 16)
SATURATED = 16
TARGET_RATIO = 0.9
START_TIMEOUT_S = 60.0


def _node_command(url: str, run_id: str, name: str) -> list[str]:
    node = Path(sys.executable).parent / "mgrpo-node"
    if not node.exists():
        raise FileNotFoundError(f"{node} not found: run `make install`")
    extra = f'[{{name: delay, factory: "mgrpo_actors.tools.delay:DelayTool", args: {{latency_s: {LATENCY_S}}}}}]'
    return [str(node), "--role", "tool", "--nats", url, "--run-id", run_id, "--name", name, "--set", "tools.actors_per_tool=1",
            "--set", "tools.serve=[delay]", "--set", f"tools.extra={extra}", "--set", "log.level=warning"]  # fmt: skip


def _start_nodes(bus: Bus, url: str, first: int, count: int) -> list[tuple[subprocess.Popen, IO[bytes]]]:
    """Start `count` tool nodes at once; return when each has announced node.started (all actors up)."""
    names = {f"{bus.run_id}-{i}" for i in range(first, first + count)}
    started: set[str] = set()
    lock = threading.Lock()

    def on_event(delivery: Delivery) -> None:  # on the bus thread: quick, no blocking Bus calls
        event = decode(delivery.data)
        if isinstance(event, Event) and event.kind == "node.started":
            with lock:
                started.add(event.node)

    def missing() -> set[str]:
        with lock:
            return names - started

    sub = bus.subscribe(bus.subjects.events, on_event)  # before the nodes start: no announcement is missed
    nodes: list[tuple[subprocess.Popen, IO[bytes]]] = []
    try:
        for name in sorted(names):
            log = tempfile.TemporaryFile()
            nodes.append((subprocess.Popen(_node_command(url, bus.run_id, name), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log), log))
        deadline = time.monotonic() + START_TIMEOUT_S
        while missing():
            for proc, log in nodes:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"tool node exited with {proc.returncode}: {log.read()[-3000:].decode(errors='replace')}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(missing())} of {count} tool nodes did not start within {START_TIMEOUT_S:g} s")
            time.sleep(0.05)
    except BaseException:
        _stop_nodes(nodes)
        raise
    finally:
        sub.stop()
    return nodes


def _stop_nodes(nodes: list[tuple[subprocess.Popen, IO[bytes]]]) -> None:
    """SIGTERM every node at once (graceful stop), then kill any still running after 15 s."""
    for proc, _ in nodes:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + 15
    for proc, log in nodes:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _drive(bus: Bus, in_flight: int, warmup_s: float, measure_s: float) -> dict[str, Any]:
    """Keep `in_flight` requests outstanding; the rate is taken from the replies of the measured window."""
    subject = bus.subjects.tool("delay")
    pending: set[concurrent.futures.Future] = set()
    sent = 0

    def send() -> None:
        nonlocal sent
        sent += 1
        pending.add(bus.request_future(subject, ToolRequest(call_id=str(sent), tool="delay", arguments={"text": str(sent)}), 30))

    for _ in range(in_flight):
        send()
    t0 = time.monotonic() + warmup_s  # the warm-up lets every server's backlog reach its steady state
    t1 = t0 + measure_s
    arrivals: list[float] = []
    while pending:
        done, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
        now = time.monotonic()
        for future in done:
            pending.discard(future)
            reply = future.result()  # RequestTimeout / RemoteFailure end the bench: a lost request is a bug
            if not (isinstance(reply, ToolResult) and reply.ok and reply.content == reply.call_id):
                raise RuntimeError(f"bad reply from the delay tool: {reply!r}")
            arrivals.append(now)
            if now < t1:
                send()
    # Replies per second from the last reply before the window to the last one in it. Servers that
    # got their first requests together stay in step while each has a backlog, so replies come in
    # bursts of up to N; a window bounded by replies, not by clock times, never cuts a burst in two.
    start = max((a for a in arrivals if a < t0), default=t0)
    window = [a for a in arrivals if start < a < t1]
    if not window:
        raise RuntimeError(f"no reply from the delay tool within {measure_s:g} s")
    return {"in_flight": in_flight, "replies": len(window), "throughput_req_s": len(window) / (window[-1] - start)}


def run(quick: bool = False, url: str | None = None) -> dict[str, Any]:
    """Measure and print; returns the figures per N and per load ({"processes": {N: {load: figures}}})."""
    warmup_s, measure_s = (0.25, 0.75) if quick else (0.4, 2.0)
    server = None if url else EmbeddedNats().start()
    target = url or server.url  # type: ignore[union-attr]
    per_n: dict[int, dict[int, dict[str, Any]]] = {}
    nodes: list[tuple[subprocess.Popen, IO[bytes]]] = []
    try:
        bus = Bus(target, run_id="bench-tools", node="bench-tools-client").connect()
        try:
            for n in PROCESSES:  # add nodes up to N (a tool node imports torch: ~4 s of CPU each)
                nodes += _start_nodes(bus, target, len(nodes), n - len(nodes))
                per_n[n] = {load: _drive(bus, load * n, warmup_s, measure_s) for load in LOADS}
        finally:
            _stop_nodes(nodes)
            bus.close()
    finally:
        if server:
            server.stop()
    for n, loads in per_n.items():
        for load, figures in loads.items():
            figures["ideal_req_s"] = n / LATENCY_S
            figures["of_ideal"] = figures["throughput_req_s"] / figures["ideal_req_s"]
            figures["scaling_ratio"] = figures["throughput_req_s"] / (n * per_n[1][load]["throughput_req_s"])
    results = {
        "latency_s": LATENCY_S, "measure_s": measure_s, "loads": LOADS, "target_ratio": TARGET_RATIO, "processes": per_n,
        "min_scaling_ratio": min(per_n[n][SATURATED]["scaling_ratio"] for n in per_n),
    }  # fmt: skip
    _print(results)
    return results


def _print(results: dict[str, Any]) -> None:
    console = Console()
    table = Table(title=f"tools: `delay` tool ({results['latency_s'] * 1000:.0f} ms) served by N tool processes, 1 actor each ({results['measure_s']:g} s per row)")
    for col in ("N", "in flight", "replies", "req/s", "ideal req/s", "of ideal", "ratio vs N·(N=1)"):
        table.add_column(col, justify="right")
    for n, loads in results["processes"].items():
        for r in loads.values():
            table.add_row(str(n), str(r["in_flight"]), str(r["replies"]), f"{r['throughput_req_s']:.1f}", f"{r['ideal_req_s']:.0f}", f"{r['of_ideal']:.3f}", f"{r['scaling_ratio']:.3f}")
    console.print(table)
    verdict = "met" if results["min_scaling_ratio"] >= results["target_ratio"] else "NOT met"
    console.print(
        f"tools: lowest scaling ratio at {SATURATED}·N in flight x{results['min_scaling_ratio']:.3f} "
        f"(target >= {results['target_ratio']:.2f} for every N: {verdict}); at {LOADS[0]}·N some servers idle (random queue-group routing)"
    )
