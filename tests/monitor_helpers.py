"""A fake finished run as the messages a monitor sees (events and query progress), with send-time
offsets, for the view, report and monitor tests."""

from __future__ import annotations

from typing import Any

from mgrpo_actors.monitoring.steps import StepLog
from protocols import Event, Message, QueryDone

# Per step: R_M, M correct, R_S, d_k mean, clip fraction of M and of S.
FIGURES = [(0.25, 0.25, 0.10, 1.5, 0.05, 0.15), (0.50, 0.50, 0.30, 2.0, 0.10, 0.20)]


def fake_run(run_id: str, steps: int = 2, queries: int = 2) -> list[tuple[Message, float]]:
    """(message, seconds after the run started) for `steps` steps of B = `queries`, K = 2, D = 8, then run.finished.

    Step n starts at 10·n s; its queries finish at +2 s and +4 s, the batches at +5 s (main) and +5.5 s
    (sub), the learners at +7 s (main: 2 s for 400 tokens) and +8 s (sub: 4 s for 1200 tokens); the
    step takes 9 s. M generated 400 tokens: 100 tok/s over the 4 s rollout. Question q_i has min(2, step + i) of its
    2 rollouts correct."""
    out: list[tuple[Message, float]] = []

    def event(kind: str, message: str, at: float, **data: Any) -> None:
        out.append((Event(kind=kind, message=message, node="fake", role="fake", data=data), at))

    for step in range(steps):
        r_m, correct, r_s, dk, clip_m, clip_s = FIGURES[step % len(FIGURES)]
        t = 10.0 * step
        event(
            "step.started",
            f"step {step}: {queries} queries × 2 rollouts",
            t,
            step=step,
            queries=[f"q{i}" for i in range(queries)],
        )
        for i in range(queries):
            out.append(
                (
                    QueryDone(
                        run_id=run_id,
                        step=step,
                        query_id=f"q{i}",
                        attempt="a0",
                        num_rollouts=2,
                        sub_calls=3,
                        seconds=2.0 * (i + 1),
                        correct_rollouts=min(2, step + i),  # q_i: i of 2 correct at step 0, one more each step
                        reward_mean=0.1 + 0.45 * min(2, step + i),
                    ),
                    t + 2.0 * (i + 1),
                )
            )
        event(
            "main.batch",
            f"main batch of step {step}: 4 samples",
            t + 5.0,
            step=step,
            reward_mean=r_m,
            r_correct_mean=correct,
            format_ok_rate=1.0,
            samples=4.0,
            failed=0.0,
            tokens=400.0,
        )
        event(
            "sub.batch",
            f"sub batch of step {step}: 32 samples",
            t + 5.5,
            step=step,
            reward_mean=r_s,
            calls=6.0,
            d=8.0,
            dk_mean=dk,
            samples=32.0,
            duplicates=10.0,
            placeholders=16.0,
            dropped=0.0,
        )
        event(
            "main.learned",
            f"main learner applied step {step}",
            t + 7.0,
            step=step,
            version=step + 1,
            loss=0.01,
            clip_fraction=clip_m,
            samples=4.0,
            seconds=2.0,
            tokens=400.0,
        )
        event(
            "sub.learned",
            f"sub learner applied step {step}",
            t + 8.0,
            step=step,
            version=step + 1,
            loss=0.02,
            clip_fraction=clip_s,
            samples=16.0,
            seconds=4.0,
            tokens=1200.0,
        )
        event("step.finished", f"step {step} finished in 9.0 s", t + 9.0, step=step, seconds=9.0)
    event("run.finished", f"run {run_id} finished after {steps} steps", 10.0 * steps, steps=steps)
    return out


def fed(log: StepLog, messages: list[tuple[Message, float]]) -> StepLog:
    """`log` after the messages (event or QueryDone, send time offset from 1000 s) were added in order."""
    for message, at in messages:
        if isinstance(message, Event):
            log.add_event(message, 1000.0 + at)
        else:
            log.add_query_done(message, 1000.0 + at)
    return log
