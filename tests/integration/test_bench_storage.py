"""`mgrpo bench storage --quick` for real: a short tiny run measured at its start, middle and end while it runs
(every stream's bytes as the run's own user, the RSS of the run and of its nats-server), with the consumed work
of all but the last steps gone from the work streams."""

from __future__ import annotations

import pytest

from mgrpo_actors.bench import storage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_the_quick_bench_measures_a_running_tiny_run_whose_work_streams_stay_short():
    results = storage.run(quick=True)
    samples = results["samples"]
    assert [samples[name]["step"] for name in ("start", "middle", "end")] == [1, 3, 5]
    for sample in samples.values():
        assert sample["bytes"] == sum(s["bytes"] for s in sample["streams"].values()) > 0
        assert sample["rss_mib"]["run"] > 50 and sample["rss_mib"]["nats-server"] > 5
    end = {
        name.removeprefix(f"mgrpo-{storage.RUN_ID}-"): s["messages"] for name, s in samples["end"]["streams"].items()
    }
    # B = K = 2: 4 trajectories and one batch a step; keep_consumed_steps 1 and the step in flight leave at most 3
    # steps' worth of the 6 published (each reader's floor is noted after its acks, which may still be on their way)
    assert end["traj-main"] <= 12 and end["batch-main"] <= 3 and end["batch-sub"] <= 3, end
    assert results["storage_growth"] is not None and set(results["rss_growth"]) == {"run", "nats-server"}
