"""What `mgrpo compare` says it took (compare/results.py time_spent, time_line)."""

from __future__ import annotations

from mgrpo_actors.compare.results import time_line, time_spent


def test_time_spent_sums_the_steps_by_kind_and_keeps_each_warm_up_s_build():
    done = {"warmup-multi": 3.0, "eval-start-multi": 60.0, "run-m-grpo-seed0": 600.0, "eval-m-grpo-seed0-step2": 90.0}
    spent = time_spent(done, {"multi": 4200.0}, 500.0, 2)
    assert spent == {
        "wall_seconds": 500.0,
        "parallel": 2,
        "steps_seconds": 753.0,
        "by_kind_seconds": {"warmup": 3.0, "eval": 150.0, "run": 600.0},
        "warmups_built_seconds": {"multi": 4200.0},
    }
    assert time_line(spent) == (
        "8 min wall, up to 2 steps at once; the steps' own time 13 min (run 10 min, eval 2 min, warmup 3 s); "
        "warm-ups built in 1 h 10 min (multi 1 h 10 min)"
    )
    assert time_line(time_spent({"run-a": 30.0}, {}, 31.0, 1)) == (
        "31 s wall, 1 step at once; the steps' own time 30 s (run 30 s)"
    )
