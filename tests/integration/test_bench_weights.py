"""`mgrpo bench weights --quick` as a smoke test: the tiny model's two versions through an embedded
nats-server's object store and a shared directory, fp32 and bf16, end bit-identical on the engine; the
bf16 delta is smaller than the full snapshot. Timings are not asserted (docs/benchmarks.md reports them)."""

from __future__ import annotations

import pytest

from mgrpo_actors.bench import weights as bench_weights

pytestmark = pytest.mark.integration


@pytest.mark.timeout(180)
def test_weights_benchmark_quick_rebuilds_the_weights_bit_for_bit():
    results = bench_weights.run(quick=True)
    assert results["bit_identical"]
    rows = {(r["wire"], r["transport"], r["kind"]): r for r in results["rows"]}
    assert len(rows) == 8
    for transport in bench_weights.TRANSPORTS:
        full, delta = rows["bfloat16", transport, "full"], rows["bfloat16", transport, "delta"]
        assert delta["mb"] < full["mb"] / 4 and 0 < delta["changed"] < 0.5
        assert full["changed"] == 1.0 and all(full[stage] >= 0 for stage in bench_weights.STAGES)
