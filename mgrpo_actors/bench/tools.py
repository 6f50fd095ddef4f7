"""`mgrpo bench tools`: does tool throughput scale with the number of tool processes?

The promise of docs/deployment.md is "start more `--role tool` processes to add tool throughput": every tool actor,
in any process, joins one queue group per tool, and NATS spreads the requests. This bench checks it
with real processes on one nats-server: for N = 1, 2, 4, 8 it runs N `mgrpo-node --role tool`
subprocesses (adding to those of the previous N) with one actor each (so N servers, each answering one
request at a time) serving the I/O-bound `delay` tool (tools/delay.py: waits LATENCY_S, like a remote
search API), keeps a fixed number of requests in flight (4·N, then 16·N: see LOADS) from one Bus in
this process for a fixed time, and times the replies.

Reported per N and load: requests/s, the ideal N / LATENCY_S, and the scaling ratio throughput(N) /
(N · throughput(1)); the issue's target is a ratio >= 0.9 for every N, checked at 16·N in flight.
The tool sleeps rather than computes, so the ratio measures the bus and the queue group, not the
machine's core count.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from mgrpo_actors.bench.tool_nodes import ToolNode, delay_tool_settings, start_tool_nodes, stop_tool_nodes
from mgrpo_actors.runtime import Bus, EmbeddedNats
from protocols import ToolRequest, ToolResult

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


def _drive(bus: Bus, in_flight: int, warmup_s: float, measure_s: float) -> dict[str, Any]:
    """Keep `in_flight` requests outstanding; the rate is taken from the replies of the measured window."""
    subject = bus.subjects.tool("delay")
    pending: set[concurrent.futures.Future] = set()
    sent = 0

    def send() -> None:
        nonlocal sent
        sent += 1
        pending.add(
            bus.request_future(subject, ToolRequest(call_id=str(sent), tool="delay", arguments={"text": str(sent)}), 30)
        )

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
    nodes: list[ToolNode] = []
    try:
        bus = Bus(target, run_id="bench-tools", node="bench-tools-client").connect()
        try:
            for n in PROCESSES:  # add nodes up to N (a tool node imports torch: ~4 s of CPU each)
                names = [f"{bus.run_id}-{i}" for i in range(len(nodes), n)]
                nodes += start_tool_nodes(bus, target, names, delay_tool_settings(LATENCY_S))
                per_n[n] = {load: _drive(bus, load * n, warmup_s, measure_s) for load in LOADS}
        finally:
            stop_tool_nodes(nodes)
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
        "latency_s": LATENCY_S,
        "measure_s": measure_s,
        "loads": LOADS,
        "target_ratio": TARGET_RATIO,
        "processes": per_n,
        "min_scaling_ratio": min(per_n[n][SATURATED]["scaling_ratio"] for n in per_n),
    }
    _print(results)
    return results


def _print(results: dict[str, Any]) -> None:
    console = Console()
    table = Table(
        title=f"tools: `delay` tool ({results['latency_s'] * 1000:.0f} ms) served by N tool processes, 1 actor each "
        f"({results['measure_s']:g} s per row)"
    )
    for col in ("N", "in flight", "replies", "req/s", "ideal req/s", "of ideal", "ratio vs N·(N=1)"):
        table.add_column(col, justify="right")
    for n, loads in results["processes"].items():
        for r in loads.values():
            table.add_row(
                str(n),
                str(r["in_flight"]),
                str(r["replies"]),
                f"{r['throughput_req_s']:.1f}",
                f"{r['ideal_req_s']:.0f}",
                f"{r['of_ideal']:.3f}",
                f"{r['scaling_ratio']:.3f}",
            )
    console.print(table)
    verdict = "met" if results["min_scaling_ratio"] >= results["target_ratio"] else "NOT met"
    console.print(
        f"tools: lowest scaling ratio at {SATURATED}·N in flight x{results['min_scaling_ratio']:.3f} "
        f"(target >= {results['target_ratio']:.2f} for every N: {verdict}); "
        f"at {LOADS[0]}·N some servers idle (random queue-group routing)"
    )
