"""Work on many tensors shared out between the calling thread and one more: weight sync's passes over every
element (weights/kernels.py) are compiled loops that let go of the GIL, so two threads run two tensors' loops at
once. Used by the learner's compare-and-cast (advance.py), the engine's reading of a delta (wire.py) and its
writing of a delta's elements (delta.py); the file's sha256 is computed on the second thread while the file is
written (wire.py).

One second thread for the process, made on first use: a one-rank learner and a CPU engine each have one compute
thread, and weight sync is never most of a step, so more threads would only contend with the compute.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["SHARE_CHANGES_FROM", "SHARE_FROM", "second_thread", "share_out"]

R = TypeVar("R")

SHARE_FROM = 1 << 16  # items of fewer elements stay on the calling thread (a hand-over costs more)
# the same for a delta's changes (decoding their indices, writing their elements): one pass over a change's elements
# each, so smaller ones than a tensor's compare pay for the hand-over
SHARE_CHANGES_FROM = 1 << 12

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_on_second_thread = threading.local()  # .yes while the second thread runs share_out's work


def _as_second_thread(task: Callable[[], R]) -> R:
    _on_second_thread.yes = True
    try:
        return task()
    finally:
        _on_second_thread.yes = False


def second_thread() -> ThreadPoolExecutor:
    """The process's one worker thread for weight sync (tasks run one at a time, in the order submitted)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(1, thread_name_prefix="mgrpo-weights")
        return _pool


def share_out(
    count: int,
    size: Callable[[int], int],
    work: Callable[[int], R],
    shareable: Callable[[int], bool] | None = None,
    share_from: int = SHARE_FROM,
) -> list[R]:
    """[work(i) for i in range(count)], each item run once: the items of at least `share_from` elements
    (`size(i)`) that are `shareable(i)` (None: every item) split between this thread and the second one, the larger
    first, each to the side with fewer elements so far; every other item on this thread. `work` must be safe to run
    on two items at once. An exception of either thread's work is raised here, once both threads are done (never
    leaving the second one writing after this returns). Called from work on the second thread, it runs every item
    there."""
    if getattr(_on_second_thread, "yes", False):  # its half would queue behind the task waiting for it
        return [work(i) for i in range(count)]
    shared = sorted(
        (i for i in range(count) if size(i) >= share_from and (shareable is None or shareable(i))),
        key=lambda i: -size(i),
    )
    mine, theirs, mine_n, theirs_n = [], [], 0, 0
    for i in shared:
        if theirs_n < mine_n:
            theirs.append(i)
            theirs_n += size(i)
        else:
            mine.append(i)
            mine_n += size(i)
    taken = set(mine) | set(theirs)
    mine += [i for i in range(count) if i not in taken]
    results: dict[int, R] = {}
    future: Future | None = None
    if theirs:
        future = second_thread().submit(_as_second_thread, lambda: {i: work(i) for i in theirs})
    try:
        for i in mine:
            results[i] = work(i)
    finally:
        if future is not None:
            results.update(future.result())
    return [results[i] for i in range(count)]
