"""A learner's CPU threads (learners.<side>.torch_threads): its share of the cores while it applies a batch.

With `--role all` the main and the sub learner live in one process and may apply batches at the same time:
each takes its share of the cores for the learners applying now (LearnerConfig.threads), rebalanced per
micro-batch, so a learner that started beside another takes every core once the other is done. With the
process's compute thread (run.compute_thread, the default: runtime/compute.py) they apply one after the other,
so each takes every core; the sharing is for `run.compute_thread: false`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from mgrpo_actors.config.learner import LearnerConfig

__all__ = ["applying_here", "rebalance_threads", "torch_threads"]

_applying_lock = threading.Lock()
_applying = 0  # trainers of this process inside apply() now (--role all: the main and the sub learner)


@contextmanager
def applying_here() -> Iterator[int]:
    """Counts this trainer among those applying a batch in this process; yields how many are (itself included)."""
    global _applying
    with _applying_lock:
        _applying += 1
        count = _applying
    try:
        yield count
    finally:
        with _applying_lock:
            _applying -= 1


def rebalance_threads(cfg: LearnerConfig) -> int:
    """Set this thread's torch threads to its share of the cores for the learners applying now, and return it: a
    learner that started beside another takes every core once the other is done, and the first of two gives up
    its second core when the other starts (called per micro-batch)."""
    with _applying_lock:
        threads = cfg.threads(max(1, _applying))
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's CPU threads set to `threads` inside (the process may share them with agents: --role all)."""
    previous = torch.get_num_threads()
    if threads != previous:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:  # rebalance_threads may have changed it inside
            torch.set_num_threads(previous)
