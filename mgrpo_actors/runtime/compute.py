"""One compute thread per process: every heavy torch computation of the process (the engines' generation and
weight loads, the learners' set-up and steps, the warm-up) runs on it, the actors' own threads only wait for it.

Why: PyTorch's CPU build runs its parallel regions on OpenMP (GNU libgomp). Each thread that runs a
multi-threaded torch op keeps a team of OpenMP threads for as long as it lives, and once the process's
OpenMP threads outnumber its CPUs libgomp stops spinning between regions and puts every team to sleep and
wakes it through the kernel instead, region after region: a decode step is hundreds of small regions.
Measured on 2 cores (Xeon, bf16): a decode-sized linear layer took 77 µs from the only computing thread and
180 µs once a second thread had computed, a SmolLM2 forward and backward 2.5 s against 2.8-4.1 s, and a
`make run` step's rollouts 1.5-1.7× as long as the same rollouts run on one thread. An actor system runs
each role on a thread of its own, so with `--role all` (or any process whose actors compute) this is the
default; `run.compute_thread: false` lets each actor compute on its own thread (a GPU process whose roles
should overlap).

`on_compute_thread(fn, ...)` runs `fn` on the compute thread and returns its result (or raises its exception)
in the caller; called on the compute thread itself, or before `start_compute_thread`, it simply calls `fn`.
The other threads are set to one torch thread each (`single_threaded_here`): a stray op there runs serially
and starts no team of its own.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any, TypeVar

__all__ = [
    "compute_thread_running",
    "on_compute_thread",
    "on_compute_thread_until",
    "single_threaded_here",
    "start_compute_thread",
]

T = TypeVar("T")

_lock = threading.Lock()
_jobs: queue.SimpleQueue[tuple[Future, Callable[[], Any]]] | None = None
_thread: threading.Thread | None = None


def _serve(jobs: queue.SimpleQueue[tuple[Future, Callable[[], Any]]], threads: int) -> None:
    import torch  # the caller had it imported already

    # What the starting thread had, not the 1 it is set to now. Asked first: a thread's first torch call takes the
    # process's last set count (the starter's 1, maybe), and that must not come after ours.
    torch.get_num_threads()
    torch.set_num_threads(threads)
    while True:
        future, job = jobs.get()
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(job())
            except BaseException as exc:  # handed to the caller, who raises it in its own thread
                future.set_exception(exc)
        del future, job  # nothing of the last job (a batch, a traceback's tensors) outlives it here


def start_compute_thread() -> None:
    """From now on `on_compute_thread` runs its work on one thread of this process (started once; it lives as long
    as the process), with the torch threads the calling thread had; the calling thread is made single-threaded."""
    global _jobs, _thread
    import torch  # a process that computes: torch is what it computes with

    with _lock:
        if _thread is None:
            _jobs = queue.SimpleQueue()
            _thread = threading.Thread(
                target=_serve, args=(_jobs, torch.get_num_threads()), name="mgrpo-compute", daemon=True
            )
            _thread.start()
    single_threaded_here()


def compute_thread_running() -> bool:
    """Whether this process routes its heavy torch work through the compute thread."""
    return _thread is not None


def single_threaded_here() -> None:
    """This thread's torch ops run on it alone (torch's thread count is per thread): it starts no OpenMP team. A
    no-op without a compute thread, where every thread keeps its own count."""
    if _thread is None or threading.current_thread() is _thread:
        return
    import torch  # here: the runtime imports no torch until a process computes

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def on_compute_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs) on the compute thread, waited for; inline when there is none or this is it. The work must
    not wait for another thread that is itself waiting for the compute thread (it would wait forever)."""
    return on_compute_thread_until(None, fn, *args, **kwargs)


def on_compute_thread_until(
    interrupted: Callable[[], None] | None, fn: Callable[..., T], *args: Any, **kwargs: Any
) -> T:
    """on_compute_thread, for long work that can be asked to stop: when the waiting caller is interrupted (Ctrl-C),
    `interrupted()` asks the work to stop, the caller waits until it has (its clean-up run) and then re-raises."""
    jobs, thread = _jobs, _thread
    if jobs is None or thread is None or threading.current_thread() is thread:
        return fn(*args, **kwargs)
    if not thread.is_alive():
        raise RuntimeError("the compute thread is gone")
    future: Future[T] = Future()
    jobs.put((future, lambda: fn(*args, **kwargs)))
    try:
        return future.result()
    except BaseException:
        if future.done() or interrupted is None:  # the work's own exception, or nothing to ask
            raise
        interrupted()
        wait([future])
        raise
