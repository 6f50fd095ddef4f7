"""`mgrpo bench crossing --quick`: a real `--role all` job in a subprocess, bytes per step by side."""

from __future__ import annotations

import pytest

from mgrpo_actors.bench.crossing import count_bytes, run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_count_bytes_puts_each_message_where_it_belongs():
    audit = [
        {"type": "SubtaskRequest", "side": None, "bytes": 10},
        {"type": "SubtaskResult", "side": None, "bytes": 20},
        {"type": "RewardStats", "side": None, "bytes": 5},
        {"type": "Trajectory", "side": "main", "bytes": 300},
        {"type": "Trajectory", "side": "sub", "bytes": 700},
        {"type": "ToolResult", "side": None, "bytes": 99},  # tools serve both sides: counted on neither
    ]
    assert count_bytes(audit) == {"crossed": 35, "main": 300, "sub": 700}


def test_the_quick_bench_counts_a_real_jobs_bytes():
    results = run(quick=True)
    per_step = results["bytes_per_step"]
    assert per_step["main"] > 0 and per_step["sub"] > 0  # trajectories and batches stayed on their sides
    assert results["crossing_messages"].get("RewardStats") == 4  # B·K scalar records crossed
    assert per_step["crossed"] < per_step["main"]
