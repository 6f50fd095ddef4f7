"""glibc's malloc told to keep the memory a process frees for its next allocations of the same sizes, instead of
handing it back to the kernel and faulting it in again page by page (`keep_freed_memory`).

Why: a bf16 CPU engine packs its linear weights once more after every weight load (engines/packed_linear.py):
SmolLM2's 211 packed copies, 269 MB, are freed and allocated again each time. glibc serves allocations of more
than 128 KB (a threshold it raises as they come and go, up to 32 MB) by mapping fresh pages, and unmaps them when
freed, so each repack faulted 269 MB in again: measured (2-core AMD EPYC, 2 threads), 140-165 ms a repack with
50,946 page faults, 61-86 ms with none once freed memory was kept. Large allocations (past `mmap_threshold`)
are still mapped and unmapped as before, and the heap keeps at most `trim_threshold` bytes of free memory at its
top. The setting is the process's: in `make run`, whose one process runs every role, the learners' allocations
of up to 256 MB come from the heap too, and the process keeps up to 1 GB of memory it freed (its peak memory is
unchanged). PyTorch's CPU performance guides get the same from jemalloc or tcmalloc; this asks glibc itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from mgrpo_actors.log import get_logger

__all__ = ["keep_freed_memory"]

log = get_logger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 256 << 20  # allocations up to this come from the heap: each packed weight of SmolLM2 (56 MB at most)
TRIM_THRESHOLD = 1 << 30  # free memory the heap may keep at its top (it may keep more below a live block)

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set glibc's two thresholds once per process (for the whole process: in `make run` its learners too); True
    if both are set, False where the C library is not glibc or refuses the mmap threshold (then neither is set)."""
    global _done
    if _done is None:
        _done = False
        try:
            mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
        except (OSError, AttributeError):
            return False
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        # The trim threshold only with the mmap one: setting it stops glibc raising its mmap threshold by itself,
        # so alone (a glibc that refuses 256 MB: before 2.35 the most was 32 MB) it would map every copy afresh.
        mmap_set = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
        trim_set = mmap_set and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        _done = mmap_set and trim_set
        log.info(
            "malloc keeps freed memory",
            mmap_threshold=MMAP_THRESHOLD if mmap_set else None,
            trim_threshold=TRIM_THRESHOLD if trim_set else None,
        )
    return _done
