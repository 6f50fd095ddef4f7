"""`mgrpo bench bus`: request/reply latency and throughput of 1 KB messages, actor runtime vs raw nats-py.

Everything runs in one invocation against one nats-server, in alternating rounds so machine noise hits
every path alike. Three paths, in two topologies:

- raw:        nats-py request -> nats-py subscription callback replying with fixed bytes;
- raw+codec:  the same, but the callback decodes the request and encodes the reply with our codec,
              and the client decodes the reply;
- runtime:    Bus.request from a caller thread -> bus thread -> NATS -> the responder's bus thread ->
              BusActor mailbox (decode, handler, encode) -> bus thread -> NATS -> caller; i.e.
              everything an actor of this project pays.

- in-process:    requester and responder in this process (raw: both on one asyncio loop);
- cross-process: the responder runs in a child process, as a tool node does in a deployment.

Ratios are runtime / raw in the same topology (issue 2's target: at most 1.2). Compare ratios, not
absolute times: the machine is shared.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import nats
from rich.console import Console
from rich.table import Table

from mgrpo_actors.runtime import Bus, BusActor, Delivery, EmbeddedNats
from protocols import ToolRequest, ToolResult, decode, encode

__all__ = ["EchoActor", "run"]

RUN_ID = "bench"
SUBJECT = "mgrpo.bench.tool.echo"
PATHS = ("raw", "raw+codec", "runtime")
TOPOLOGIES = ("in-process", "cross-process")


def _payload(size: int = 1024) -> ToolRequest:
    """A ToolRequest whose encoded size is exactly `size` bytes."""
    n = size
    for _ in range(8):  # msgpack's string header grows with the length: converge on the exact size
        req = ToolRequest(call_id="c", tool="echo", arguments={"text": "x" * n})
        n += size - len(encode(req))
    return req


def _echo(req: ToolRequest) -> ToolResult:
    return ToolResult(call_id=req.call_id, ok=True, content=req.arguments["text"])


class EchoActor(BusActor):
    """The runtime path's responder."""

    role = "bench"

    def on_start(self) -> None:
        super().on_start()
        self.listen(SUBJECT, queue="echo")

    def handlers(self) -> dict:
        return {ToolRequest: self.on_request}

    def on_request(self, req: ToolRequest, delivery: Delivery) -> ToolResult:
        return _echo(req)


# ---- responders -------------------------------------------------------------------------------
async def _raw_responder(url: str, with_codec: bool) -> Any:
    nc = await nats.connect(url)
    fixed = encode(_echo(_payload()))

    async def respond(msg: Any) -> None:
        await msg.respond(encode(_echo(decode(msg.data))) if with_codec else fixed)  # type: ignore[arg-type]

    await nc.subscribe(SUBJECT, queue="echo", cb=respond)
    await nc.flush()
    return nc


def _runtime_responder(url: str) -> tuple[Bus, Any]:
    bus = Bus(url, run_id=RUN_ID, node="bench-responder").connect()
    return bus, EchoActor.start_ready(bus)


def serve(url: str, path: str) -> None:
    """Child-process responder for the cross-process topology: serve until stdin closes."""
    if path == "runtime":
        bus, actor = _runtime_responder(url)
        print("ready", flush=True)
        sys.stdin.read()
        actor.stop()
        bus.close()
        return

    async def main() -> None:
        nc = await _raw_responder(url, with_codec=path == "raw+codec")
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await nc.close()

    asyncio.run(main())


# ---- requesters -------------------------------------------------------------------------------
async def _raw_requests(
    url: str, data: bytes, n_latency: int, n_throughput: int, window: int, decode_replies: bool
) -> tuple[list[float], float]:
    # Connect after the responder subscribed and round-trip once: nats-server may answer "no
    # responders" to a connection's first publish when that connection predates the subscription.
    client = await nats.connect(url)
    await client.flush()
    try:
        latencies = []
        for _ in range(n_latency):
            t = time.perf_counter()
            reply = await client.request(SUBJECT, data, timeout=5)
            if decode_replies:
                decode(reply.data)
            latencies.append(time.perf_counter() - t)
        t = time.perf_counter()
        for start in range(0, n_throughput, window):
            replies = await asyncio.gather(
                *(client.request(SUBJECT, data, timeout=10) for _ in range(min(window, n_throughput - start)))
            )
            if decode_replies:
                for r in replies:
                    decode(r.data)
        return latencies, n_throughput / (time.perf_counter() - t)
    finally:
        await client.close()


def _runtime_requests(
    url: str, message: ToolRequest, n_latency: int, n_throughput: int, window: int
) -> tuple[list[float], float]:
    client = Bus(url, run_id=RUN_ID, node="bench-client").connect()
    try:
        client.request(SUBJECT, message)  # warm-up
        latencies = []
        for _ in range(n_latency):
            t = time.perf_counter()
            client.request(SUBJECT, message)
            latencies.append(time.perf_counter() - t)
        t = time.perf_counter()
        for start in range(0, n_throughput, window):
            futures = [client.request_future(SUBJECT, message, 10) for _ in range(min(window, n_throughput - start))]
            for f in futures:
                f.result()
        return latencies, n_throughput / (time.perf_counter() - t)
    finally:
        client.close()


# ---- one round of one path in one topology ------------------------------------------------------
def _measure(url: str, path: str, message: ToolRequest, counts: tuple[int, int, int]) -> tuple[list[float], float]:
    if path == "runtime":
        return _runtime_requests(url, message, *counts)
    return asyncio.run(_raw_requests(url, encode(message), *counts, decode_replies=path == "raw+codec"))


def _in_process(url: str, path: str, message: ToolRequest, counts: tuple[int, int, int]) -> tuple[list[float], float]:
    if path == "runtime":
        bus, actor = _runtime_responder(url)
        try:
            return _measure(url, path, message, counts)
        finally:
            actor.stop()
            bus.close()

    async def both() -> tuple[list[float], float]:  # raw: requester and responder share one loop
        responder = await _raw_responder(url, with_codec=path == "raw+codec")
        try:
            return await _raw_requests(url, encode(message), *counts, decode_replies=path == "raw+codec")
        finally:
            await responder.close()

    return asyncio.run(both())


def _cross_process(
    url: str, path: str, message: ToolRequest, counts: tuple[int, int, int]
) -> tuple[list[float], float]:
    child = subprocess.Popen(
        [sys.executable, "-c", f"from mgrpo_actors.bench.bus import serve; serve({url!r}, {path!r})"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if child.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
            raise RuntimeError(f"bench responder ({path}) did not start")
        return _measure(url, path, message, counts)
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait(timeout=30)


def run(quick: bool = False, url: str | None = None, rounds: int | None = None) -> dict[str, Any]:
    """Measure and print; returns the figures (µs, messages/s, ratios) per topology and path."""
    counts = (200, 1000, 32) if quick else (2000, 10000, 64)
    rounds = rounds or (1 if quick else 3)
    message = _payload(1024)
    topologies: dict[str, Callable[..., tuple[list[float], float]]] = {
        "in-process": _in_process,
        "cross-process": _cross_process,
    }
    lat = {(t, p): [] for t in TOPOLOGIES for p in PATHS}  # type: dict[tuple[str, str], list[float]]
    rates = {(t, p): [] for t in TOPOLOGIES for p in PATHS}  # type: dict[tuple[str, str], list[float]]
    server = None if url else EmbeddedNats().start()
    target = url or server.url  # type: ignore[union-attr]
    try:
        for _ in range(rounds):
            for topology in TOPOLOGIES:
                for path in PATHS:
                    latencies, rate = topologies[topology](target, path, message, counts)
                    lat[topology, path].extend(latencies)
                    rates[topology, path].append(rate)
    finally:
        if server:
            server.stop()
    results: dict[str, Any] = {
        "message_bytes": len(encode(message)),
        "rounds": rounds,
        "requests_latency": counts[0] * rounds,
        "requests_throughput": counts[1] * rounds,
        "window": counts[2],
    }
    for topology in TOPOLOGIES:
        per_path = {}
        for path in PATHS:
            ordered = sorted(lat[topology, path])
            per_path[path] = {
                "p50_us": ordered[len(ordered) // 2] * 1e6,
                "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6,
                "throughput_msg_s": statistics.median(rates[topology, path]),
            }
        per_path["ratio_latency_p50"] = per_path["runtime"]["p50_us"] / per_path["raw"]["p50_us"]
        per_path["ratio_throughput"] = per_path["raw"]["throughput_msg_s"] / per_path["runtime"]["throughput_msg_s"]
        per_path["ratio_latency_p50_vs_codec"] = per_path["runtime"]["p50_us"] / per_path["raw+codec"]["p50_us"]
        results[topology] = per_path
    _print(results)
    return results


def _print(results: dict[str, Any]) -> None:
    console = Console()
    table = Table(
        title=f"bus: request/reply of {results['message_bytes']} B messages "
        f"({results['rounds']} rounds, window {results['window']})"
    )
    for col in ("topology", "path", "p50 µs", "p99 µs", "msg/s"):
        table.add_column(col, justify="right")
    for topology in TOPOLOGIES:
        for path in PATHS:
            r = results[topology][path]
            table.add_row(topology, path, f"{r['p50_us']:.0f}", f"{r['p99_us']:.0f}", f"{r['throughput_msg_s']:.0f}")
    console.print(table)
    for topology in TOPOLOGIES:
        r = results[topology]
        console.print(
            f"{topology}: runtime / raw nats-py: latency p50 x{r['ratio_latency_p50']:.2f} "
            f"(x{r['ratio_latency_p50_vs_codec']:.2f} vs raw+codec), "
            f"throughput cost x{r['ratio_throughput']:.2f} (target <= 1.20)"
        )
