"""engines/freed_memory.py: once glibc keeps freed memory, a tensor freed and allocated again (as a repack's
packed weights are) comes back without faulting its pages in afresh."""

from __future__ import annotations

import resource

import pytest
import torch

from mgrpo_actors.engines.freed_memory import keep_freed_memory


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_memory_freed_and_allocated_again_is_not_faulted_in_afresh():
    if not keep_freed_memory():
        pytest.skip("the C library is not glibc, or refused the thresholds")
    assert keep_freed_memory()  # once per process, then the same answer
    size = 32 << 20  # 128 MB of fp32: glibc would map it afresh every time by default
    faults = []
    for _ in range(6):  # the heap grows to hold it (a small allocation may take the freed top once or twice)
        before = _minor_faults()
        torch.ones(size).sum()
        faults.append(_minor_faults() - before)
    # 32,768 pages each time if each allocation were faulted in again; a few dozen for the rest of the work
    assert sum(f < 1000 for f in faults[2:]) >= 3, faults
