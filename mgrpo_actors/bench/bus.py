"""`mgrpo bench bus`: request/reply latency and throughput of 1 KB messages, actor runtime vs raw nats-py.

Both run in the same process against the same nats-server, alternating rounds so machine noise hits
both alike. Three paths are measured:
- raw:        nats-py request -> nats-py subscription callback replying with fixed bytes;
- raw+codec:  the same, but the callback decodes the request and encodes the reply with our codec;
- runtime:    Bus.request from a caller thread -> BusActor (pykka mailbox, decode, handler, encode)
              on a second Bus; i.e. everything an actor of this project pays.
Target (issue 2): runtime within 1.2x of raw nats-py (latency p50 and throughput).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import nats
from rich.console import Console
from rich.table import Table

from mgrpo_actors.runtime import Bus, BusActor, Delivery, EmbeddedNats
from protocols import ToolRequest, ToolResult, decode, encode

__all__ = ["run"]

RUN_ID = "bench"
SUBJECT = "mgrpo.bench.tool.echo"


def _payload(size: int = 1024) -> ToolRequest:
    """A ToolRequest whose encoded size is exactly `size` bytes."""
    n = size
    for _ in range(8):  # msgpack's string header grows with the length: converge on the exact size
        req = ToolRequest(call_id="c", tool="echo", arguments={"text": "x" * n})
        n += size - len(encode(req))
    return req


class EchoActor(BusActor):
    role = "bench"

    def on_start(self) -> None:
        super().on_start()
        self.listen(SUBJECT, queue="echo")

    def handlers(self) -> dict:
        return {ToolRequest: self.on_request}

    def on_request(self, req: ToolRequest, delivery: Delivery) -> ToolResult:
        return ToolResult(call_id=req.call_id, ok=True, content=req.arguments["text"])


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_us": ordered[len(ordered) // 2] * 1e6, "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6}


async def _raw_round(url: str, data: bytes, n_latency: int, n_throughput: int, window: int, with_codec: bool) -> tuple[list[float], float]:
    server = await nats.connect(url)
    reply = encode(ToolResult(call_id="c", ok=True, content=decode(data).arguments["text"]))  # type: ignore[attr-defined]

    async def respond(msg: Any) -> None:
        if with_codec:
            req = decode(msg.data)
            await msg.respond(encode(ToolResult(call_id=req.call_id, ok=True, content=req.arguments["text"])))  # type: ignore[attr-defined]
        else:
            await msg.respond(reply)

    await server.subscribe(SUBJECT, queue="echo-raw", cb=respond)
    await server.flush()
    # Connect the client after the subscription exists and round-trip once: nats-server may answer
    # "no responders" to a connection's first publish when that connection predates the subscription.
    client = await nats.connect(url)
    await client.flush()
    try:
        return await _raw_measure(client, data, n_latency, n_throughput, window, with_codec)
    finally:
        await client.close()
        await server.close()


async def _raw_measure(client: Any, data: bytes, n_latency: int, n_throughput: int, window: int, with_codec: bool) -> tuple[list[float], float]:
    latencies = []
    for _ in range(n_latency):
        t = time.perf_counter()
        raw = await client.request(SUBJECT, data, timeout=5)
        if with_codec:
            decode(raw.data)
        latencies.append(time.perf_counter() - t)
    t = time.perf_counter()
    for start in range(0, n_throughput, window):
        replies = await asyncio.gather(*(client.request(SUBJECT, data, timeout=10) for _ in range(min(window, n_throughput - start))))
        if with_codec:
            for r in replies:
                decode(r.data)
    rate = n_throughput / (time.perf_counter() - t)
    return latencies, rate


def _runtime_round(url: str, message: ToolRequest, n_latency: int, n_throughput: int, window: int) -> tuple[list[float], float]:
    server_bus = Bus(url, run_id=RUN_ID, node="bench-server").connect()
    client_bus = Bus(url, run_id=RUN_ID, node="bench-client").connect()
    actor = EchoActor.start_ready(server_bus)
    try:
        client_bus.request(SUBJECT, message)  # warm-up: the subscription is live once this returns
        latencies = []
        for _ in range(n_latency):
            t = time.perf_counter()
            client_bus.request(SUBJECT, message)
            latencies.append(time.perf_counter() - t)
        t = time.perf_counter()
        for start in range(0, n_throughput, window):
            futures = [client_bus.request_future(SUBJECT, message, 10) for _ in range(min(window, n_throughput - start))]
            for f in futures:
                f.result()
        rate = n_throughput / (time.perf_counter() - t)
    finally:
        actor.stop()
        client_bus.close()
        server_bus.close()
    return latencies, rate


def run(quick: bool = False, url: str | None = None, rounds: int | None = None) -> dict[str, Any]:
    """Measure and print; returns the figures (µs, messages/s, ratios)."""
    n_latency, n_throughput, window = (200, 1000, 32) if quick else (2000, 10000, 64)
    rounds = rounds or (1 if quick else 3)
    message = _payload(1024)
    data = encode(message)
    server = None if url else EmbeddedNats().start()
    target = url or server.url  # type: ignore[union-attr]
    lat: dict[str, list[float]] = {"raw": [], "raw+codec": [], "runtime": []}
    rates: dict[str, list[float]] = {"raw": [], "raw+codec": [], "runtime": []}
    try:
        for _ in range(rounds):
            for name in ("raw", "raw+codec", "runtime"):
                if name == "runtime":
                    l, r = _runtime_round(target, message, n_latency, n_throughput, window)
                else:
                    l, r = asyncio.run(_raw_round(target, data, n_latency, n_throughput, window, name == "raw+codec"))
                lat[name].extend(l)
                rates[name].append(r)
    finally:
        if server:
            server.stop()
    results: dict[str, Any] = {"message_bytes": len(data), "rounds": rounds, "requests_latency": n_latency * rounds, "requests_throughput": n_throughput * rounds, "window": window}
    for name in lat:
        results[name] = {**_percentiles(lat[name]), "throughput_msg_s": statistics.median(rates[name])}
    results["ratio_latency_p50"] = results["runtime"]["p50_us"] / results["raw"]["p50_us"]
    results["ratio_throughput"] = results["raw"]["throughput_msg_s"] / results["runtime"]["throughput_msg_s"]
    _print(results)
    return results


def _print(results: dict[str, Any]) -> None:
    table = Table(title=f"bus: request/reply of {results['message_bytes']} B messages ({results['rounds']} rounds, window {results['window']})")
    for col in ("path", "p50 µs", "p99 µs", "msg/s"):
        table.add_column(col, justify="right")
    for name in ("raw", "raw+codec", "runtime"):
        r = results[name]
        table.add_row(name, f"{r['p50_us']:.0f}", f"{r['p99_us']:.0f}", f"{r['throughput_msg_s']:.0f}")
    Console().print(table)
    Console().print(
        f"runtime / raw nats-py: latency p50 x{results['ratio_latency_p50']:.2f}, "
        f"throughput cost x{results['ratio_throughput']:.2f} (target <= 1.20)"
    )
