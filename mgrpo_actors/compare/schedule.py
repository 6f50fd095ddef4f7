"""How `mgrpo compare --parallel N` runs its steps: each as soon as the steps it builds on have finished, up to N
at once, each on its own share of the cores.

Why: a step is a process of its own, and on a small CPU one process does not use every core well. Measured on
2 cores with the 2.6M-parameter web models (docs/benchmarks.md): an evaluation of 64 questions took 36.8 s on
1 thread and 45.8 s on 2, and two 1-thread evaluations, one on each core, 37.4 s for both: twice the work of
the 1-thread one in the same time. Warm-up training gained 1.08x that way. A step that runs beside others gets
its share of the cores by CPU affinity (Linux; elsewhere it only runs beside them), which its child process
inherits; a learner's default threads follow it (learners.<side>.torch_threads 0: the cores the process may
use), an engine's are agents.torch_threads.

A step marked `alone` (a warm-up: a long training that a step beside it would slow several times over; measured,
two warm-up trainings at once on 2 cores ran each step about 6x slower than one alone) runs with no other step
beside it and on every core: once it is ready, it waits for the running steps to finish, and no step after it in
the plan's order starts before it.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["CoreLanes", "Step", "core_shares", "run_graph"]


@dataclass(frozen=True)
class Step:
    """One step of a plan: its name, the steps whose results it needs, what it does, and whether it runs alone."""

    name: str
    after: Sequence[str]
    work: Callable[[], Any]
    alone: bool = False


def core_shares(cores: Sequence[int], parallel: int) -> list[list[int]]:
    """`cores` dealt into `parallel` shares as even as they go ([0, 1, 2] into 2: [0, 2], [1]); with fewer cores
    than shares, every share is every core (the steps then share them, unpinned)."""
    if parallel < 1:
        raise ValueError(f"need parallel >= 1, got {parallel}")
    if len(cores) < parallel:
        return [list(cores) for _ in range(parallel)]
    return [list(cores[i::parallel]) for i in range(parallel)]


class CoreLanes:
    """`parallel` lanes, each a share of this process's cores; a step takes a free lane while it runs."""

    def __init__(self, parallel: int) -> None:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.pinned = parallel > 1 and len(cores) >= parallel
        self._free: queue.Queue[list[int]] = queue.Queue()
        for share in core_shares(cores, parallel):
            self._free.put(share)

    @contextmanager
    def lane(self) -> Iterator[None]:
        """A free lane while the block runs: with more than one lane, the calling thread is pinned to the lane's
        cores (Linux affinity is per thread), so the processes it starts run there."""
        share = self._free.get()
        before = os.sched_getaffinity(0) if self.pinned else None
        try:
            if self.pinned:
                os.sched_setaffinity(0, share)
            yield
        finally:
            if before is not None:
                os.sched_setaffinity(0, before)
            self._free.put(share)


def run_graph(steps: Sequence[Step], parallel: int, stop: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Run every step once all of its `after` have finished, up to `parallel` at once, ready steps in the order
    given, a step marked `alone` with none beside it (once it is ready, no step after it in the order starts
    before it); {name: what its work returned}. A step that raises lets the running ones finish, starts no other,
    and its exception is raised. Interrupted (Ctrl-C) while steps run, it calls `stop()` (which must make the
    running steps return, e.g. by stopping their processes) before the interrupt goes on."""
    names = [step.name for step in steps]
    unknown = sorted({dep for step in steps for dep in step.after} - set(names))
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"a plan's steps need unique names and known dependencies (unknown: {unknown})")
    pending, results, running = list(steps), {}, {}
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        try:
            failure = _run_ready(pool, pending, results, running, parallel)
        except BaseException:
            stop()  # else leaving this block would wait for every running step to end by itself
            raise
    if failure is not None:
        raise failure
    return results


def _run_ready(
    pool: ThreadPoolExecutor, pending: list[Step], results: dict[str, Any], running: dict[Future, str], parallel: int
) -> BaseException | None:
    """run_graph's loop: start the ready steps, collect the finished ones; the first failure, if any."""
    failure: BaseException | None = None
    while running or (pending and failure is None):
        for step in [s for s in pending if all(dep in results for dep in s.after)]:
            if failure is not None or len(running) >= parallel or (running and step.alone):
                break  # a ready step that runs alone waits for the running ones, and the steps after it for it
            pending.remove(step)
            running[pool.submit(step.work)] = step.name
            if step.alone:
                break
        if not running:
            raise ValueError(f"steps that wait on each other: {[s.name for s in pending]}")
        finished: set[Future] = wait(running, return_when=FIRST_COMPLETED).done
        for future in finished:
            name = running.pop(future)
            if future.exception() is not None:
                failure = failure or future.exception()
            else:
                results[name] = future.result()
    return failure
