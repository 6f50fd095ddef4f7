"""`mgrpo bench soak`: valid load and hostile traffic together against two tool nodes (issue 8).

Two real `mgrpo-node --role tool` processes (default settings, serving the I/O-bound `delay` tool at
LATENCY_S) share the tool's queue group on one nats-server. For a fixed time, WORKERS client threads
each keep one valid request in flight, sent the way the agents send tool calls (`request_retrying`
with the pipeline's default per-call timeout and retries), and check every reply (the delay tool echoes
a text unique to the request). Meanwhile an attacker on its own connection sends, round after round,
the traffic of issue 8 (bench/hostile.py: garbage, bad reply subjects, a map bomb, a 1 MiB request,
floods, a PUB over the server's max_payload) and, once, the raw message that used to make a node deaf.

Printed: valid requests sent / served / lost / retried, the slowest, hostile messages sent per kind,
dead letters per error type, slow-consumer drops (the nodes' `bus.slow_consumer_drops` metric), node
reconnects, and each node's memory (RSS before the load, its peak during it, at the end). Target: 0
valid requests lost, and no node's memory growing past MEMORY_BOUND_MIB over its RSS before the load.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from mgrpo_actors.bench.hostile import HostileTraffic
from mgrpo_actors.bench.tool_nodes import ToolNode, delay_tool_settings, start_tool_nodes, stop_tool_nodes
from mgrpo_actors.config.pipeline import PipelineConfig
from mgrpo_actors.runtime import Bus, Delivery, EmbeddedNats, request_retrying
from mgrpo_actors.runtime.slow_consumers import SLOW_CONSUMER_METRIC
from protocols import DeadLetter, Metric, ToolRequest, ToolResult, decode

__all__ = ["LATENCY_S", "MEMORY_BOUND_MIB", "NODES", "WORKERS", "run"]

NODES = 2
WORKERS = 16  # valid requests in flight
LATENCY_S = 0.02  # the delay tool's wait: a fast remote API
HOSTILE_PERIOD_S = 0.5  # one attack every this long
DEAFEN_AT = 0.5  # the raw deafening message goes out half-way: the first half meets the other attacks on live nodes
MEMORY_BOUND_MIB = 512  # a node's RSS may grow by at most this much over its RSS before the load
# Per-call timeout and retries: those the agents use for tool calls (config/pipeline.py defaults).
TIMEOUT_S = PipelineConfig().tool_timeout_s
RETRIES = PipelineConfig().call_retries


@dataclass
class ValidLoad:
    """What became of the valid requests (updated by the worker threads)."""

    sent: int = 0
    served: int = 0
    lost: int = 0
    retried: int = 0  # requests sent more than once (a further attempt, or a resend while nobody listened)
    extra_attempts: int = 0  # sends beyond the first
    slowest_s: float = 0.0
    errors: collections.Counter = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, ok: bool, sends: int, seconds: float, error: str) -> None:
        with self.lock:
            self.sent += 1
            self.served += ok
            self.lost += not ok
            self.retried += sends > 1
            self.extra_attempts += sends - 1
            self.slowest_s = max(self.slowest_s, seconds)
            if error:
                self.errors[error[:120]] += 1


@dataclass
class Watch:
    """Dead letters and slow-consumer drops seen on the run's subjects (updated on the bus thread)."""

    dead_letters: collections.Counter = field(default_factory=collections.Counter)
    drops: dict[str, float] = field(default_factory=dict)  # node -> its running total

    def on_dead_letter(self, delivery: Delivery) -> None:
        letter = decode(delivery.data)
        if isinstance(letter, DeadLetter):
            self.dead_letters[letter.error_type] += 1

    def on_drops(self, delivery: Delivery) -> None:
        metric = decode(delivery.data)
        if isinstance(metric, Metric):
            self.drops[metric.node] = max(self.drops.get(metric.node, 0.0), metric.value)


def _worker(bus: Bus, index: int, stop_at: float, load: ValidLoad) -> None:
    subject, n = bus.subjects.tool("delay"), 0
    while time.monotonic() < stop_at:
        n += 1
        text = f"valid {index}-{n}"
        outcome = request_retrying(
            bus, subject, ToolRequest(call_id=text, tool="delay", arguments={"text": text}), TIMEOUT_S, RETRIES
        )
        reply = outcome.reply
        ok = isinstance(reply, ToolResult) and reply.ok and reply.content == text
        error = outcome.error or ("" if ok else f"wrong reply: {reply!r}")
        load.record(ok, outcome.sends, outcome.seconds, error)  # sends: "no responders" resends count here


def _attack(hostile: HostileTraffic, stop_at: float, deafen_at: float | None, stop: threading.Event) -> None:
    attacks = hostile.cycle()
    i = 0
    while time.monotonic() < stop_at and not stop.is_set():
        if deafen_at is not None and time.monotonic() >= deafen_at:
            hostile.deafen()
            deafen_at = None
        attacks[i % len(attacks)]()
        i += 1
        stop.wait(HOSTILE_PERIOD_S)


def _memory(nodes: list[ToolNode], stop: threading.Event, samples: dict[str, list[int]]) -> None:
    while not stop.is_set():
        for node in nodes:
            rss = node.memory_kib("VmRSS")
            if rss is not None:
                samples[node.name].append(rss)
        stop.wait(0.25)


def run(
    quick: bool = False, url: str | None = None, duration_s: float | None = None, deafen: bool = True
) -> dict[str, Any]:
    """Soak for `duration_s` (default 60 s, 20 s quick), print the report, return its figures."""
    duration_s = duration_s or (20.0 if quick else 60.0)
    server = None if url else EmbeddedNats().start()
    target = url or server.url  # type: ignore[union-attr]
    nodes: list[ToolNode] = []
    try:
        client = Bus(target, run_id="bench-soak", node="soak-client").connect()
        attacker = Bus(target, run_id="bench-soak", node="soak-attacker")
        try:
            attacker.connect()
            nodes = start_tool_nodes(
                client,
                target,
                [f"soak-tool-{i}" for i in range(NODES)],
                delay_tool_settings(LATENCY_S, actors_per_tool=2),
            )
            results = _soak(client, attacker, target, nodes, duration_s, deafen)
        finally:
            stop_tool_nodes(nodes)
            attacker.close()
            client.close()
    finally:
        if server:
            server.stop()
    _print(results)
    return results


def _soak(
    client: Bus, attacker: Bus, url: str, nodes: list[ToolNode], duration_s: float, deafen: bool
) -> dict[str, Any]:
    watch = Watch()
    subs = [
        client.subscribe(client.subjects.dlq(), watch.on_dead_letter),
        client.subscribe(client.subjects.metrics(SLOW_CONSUMER_METRIC), watch.on_drops),
    ]
    samples: dict[str, list[int]] = {node.name: [] for node in nodes}
    before = {node.name: node.memory_kib("VmRSS") or 0 for node in nodes}
    load, hostile, stop = ValidLoad(), HostileTraffic(attacker, url, "delay"), threading.Event()
    started = time.monotonic()
    stop_at = started + duration_s
    threads = [threading.Thread(target=_worker, args=(client, i, stop_at, load), daemon=True) for i in range(WORKERS)]
    threads.append(
        threading.Thread(
            target=_attack,
            args=(hostile, stop_at, started + DEAFEN_AT * duration_s if deafen else None, stop),
            daemon=True,
        )
    )
    sampler = threading.Thread(target=_memory, args=(nodes, stop, samples), daemon=True)
    for thread in [*threads, sampler]:
        thread.start()
    budget_s = TIMEOUT_S * (RETRIES + 1) + 10  # a request sent just before the end may use its whole budget
    for thread in threads:
        thread.join(max(0.0, stop_at + budget_s - time.monotonic()))
    stop.set()
    sampler.join()
    time.sleep(1.5)  # the last slow-consumer metric (at most one a second) and dead letters arrive
    for sub in subs:
        sub.stop()
    for node in nodes:
        if node.proc.poll() is not None:
            raise RuntimeError(
                f"tool node {node.name} died during the soak (exit {node.proc.returncode}): {node.log_text(3000)}"
            )
    memory = {
        node.name: {
            "before_mib": before[node.name] / 1024,
            "peak_mib": max(samples[node.name], default=0) / 1024,
            "end_mib": (samples[node.name] or [0])[-1] / 1024,
            "reconnects": node.log_text().count("nats disconnected"),
        }
        for node in nodes
    }
    return {
        "duration_s": duration_s,
        "seconds": time.monotonic() - started,
        "workers": WORKERS,
        "nodes": len(nodes),
        "timeout_s": TIMEOUT_S,
        "retries": RETRIES,
        "unfinished_workers": sum(t.is_alive() for t in threads[:-1]),
        "valid": {
            "sent": load.sent,
            "served": load.served,
            "lost": load.lost,
            "retried": load.retried,
            "extra_attempts": load.extra_attempts,
            "slowest_s": load.slowest_s,
            "errors": dict(load.errors),
        },
        "hostile": dict(hostile.sent),
        "dead_letters": dict(watch.dead_letters),
        "slow_consumer_drops": sum(watch.drops.values()),
        "memory": memory,
        "memory_bound_mib": MEMORY_BOUND_MIB,
        "memory_bounded": all(m["peak_mib"] - m["before_mib"] <= MEMORY_BOUND_MIB for m in memory.values()),
    }


def _print(results: dict[str, Any]) -> None:
    console = Console()
    valid = results["valid"]
    console.print(
        f"soak: {results['nodes']} tool nodes, {results['workers']} valid requests in flight "
        f"for {results['duration_s']:g} s (per call {results['timeout_s']:g} s timeout, {results['retries']} retries), "
        "hostile traffic alongside"
    )
    table = Table(title="valid requests")
    for col in ("sent", "served", "lost", "retried", "extra attempts", "slowest s"):
        table.add_column(col, justify="right")
    table.add_row(
        *(str(valid[k]) for k in ("sent", "served", "lost", "retried", "extra_attempts")), f"{valid['slowest_s']:.2f}"
    )
    console.print(table)
    for error, count in valid["errors"].items():
        console.print(f"  lost or retried-then-lost: {count} × {error}")
    console.print("hostile sent: " + ", ".join(f"{k} {v}" for k, v in sorted(results["hostile"].items())))
    console.print(
        "dead letters: " + (", ".join(f"{k} {v}" for k, v in sorted(results["dead_letters"].items())) or "none")
    )
    console.print(f"slow-consumer drops: {results['slow_consumer_drops']:g}")
    memory = Table(title=f"tool nodes (memory bound: +{results['memory_bound_mib']} MiB)")
    for col in ("node", "RSS before MiB", "peak MiB", "end MiB", "reconnects"):
        memory.add_column(col, justify="right")
    for name, m in results["memory"].items():
        memory.add_row(
            name, f"{m['before_mib']:.0f}", f"{m['peak_mib']:.0f}", f"{m['end_mib']:.0f}", str(m["reconnects"])
        )
    console.print(memory)
    verdict = (
        "met" if valid["lost"] == 0 and results["memory_bounded"] and not results["unfinished_workers"] else "NOT met"
    )
    console.print(
        f"soak: {valid['lost']} of {valid['sent']} valid requests lost, memory bounded: {results['memory_bounded']} "
        f"(target 0 lost, bounded: {verdict})"
    )
