"""`mgrpo bench bus --quick` as a smoke test: it runs on a real nats-server and returns its figures.
Only structure and positivity are checked: timings on a shared CI machine are noise."""

from __future__ import annotations

import math

import pytest

from mgrpo_actors.bench import bus as bench_bus
from protocols import encode

pytestmark = pytest.mark.integration


def test_bus_benchmark_quick_returns_its_figures(nats_server):
    results = bench_bus.run(quick=True, url=nats_server.url)
    assert results["message_bytes"] > 0
    assert results["rounds"] >= 1 and results["requests_latency"] > 0 and results["requests_throughput"] > 0
    for topology in ("in-process", "cross-process"):
        for path in ("raw", "raw+codec", "runtime"):
            figures = results[topology][path]
            assert set(figures) >= {"p50_us", "p99_us", "throughput_msg_s"}, path
            assert all(math.isfinite(v) and v > 0 for v in figures.values()), (path, figures)
            assert figures["p99_us"] >= figures["p50_us"], (path, figures)
        for ratio in ("ratio_latency_p50", "ratio_throughput", "ratio_latency_p50_vs_codec"):
            assert math.isfinite(results[topology][ratio]) and results[topology][ratio] > 0


def test_bench_payload_has_the_size_it_promises():
    # bench/bus.py: "_payload(size): A ToolRequest whose encoded size is `size` bytes" (the table says 1024 B).
    assert len(encode(bench_bus._payload(1024))) == 1024
