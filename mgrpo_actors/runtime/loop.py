"""`BusLoop`: the asyncio event loop a process's NATS connection runs on, on a thread of its own.

Actor threads hand coroutines to it (`call` waits for the result, `submit` does not). Everything in
the runtime that touches nats-py goes through one of these, so nothing but this module knows about
the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.errors import BusError

__all__ = ["BusLoop", "cancel_task"]

T = TypeVar("T")

log = get_logger(__name__)


class BusLoop:
    """An event loop running forever on a daemon thread, with a blocking API for other threads."""

    def __init__(self, name: str, describe: str) -> None:
        """name: the thread's name; describe: what the loop serves, for error messages (a URL)."""
        self.loop = asyncio.new_event_loop()
        self.describe = describe
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopping = False  # set by stop(): from then on nothing new is taken
        self._stop_lock = threading.Lock()
        self._started = threading.Event()  # set by the loop's first callback: the loop is running

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._on_started)
        self.loop.run_forever()

    def _on_started(self) -> None:
        self._started.set()
        if self._stopping:  # stop() came while the thread was starting: it found no loop running to stop
            self.loop.stop()

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the thread and return once its loop runs. Until then `running` is False and `submit` refuses
        work, so a caller on a loaded machine that submitted at once would find its work dropped. BusError if the
        loop was stopped before, or its thread dies or does not get it running within `timeout_s`."""
        if self._stopping or self.loop.is_closed():
            raise BusError(f"the event loop for {self.describe} was stopped: it cannot start again")
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._started.wait(0.05):
            if not self._thread.is_alive():
                raise BusError(f"the event loop for {self.describe} ended before it ran")
            if time.monotonic() >= deadline:
                raise BusError(f"the event loop for {self.describe} did not start within {timeout_s:g} s")

    @property
    def running(self) -> bool:
        return self.loop.is_running() and not self.loop.is_closed() and not self._stopping

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def on_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def require_other_thread(self, what: str) -> None:
        """Raise BusError if called on the loop's thread: waiting there for the loop would deadlock."""
        if self.on_loop_thread():
            raise BusError(f"{what} from the bus thread would deadlock: deliver to an actor instead")

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        """Run `coro` on the loop and wait for its result."""
        try:
            self.require_other_thread("Bus.call")
            if not self.running:
                raise BusError(f"bus to {self.describe} is closed")
        except BusError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T] | None:
        """Run `coro` on the loop without waiting; failures are logged. None once the loop is gone."""
        if not self.running:
            coro.close()
            return None
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        future.add_done_callback(_log_failure)
        return future

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Schedule a plain callback on the loop from any thread (dropped once the loop is closed)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(callback, *args)

    def stop(self, before_stop: Callable[[], None] | None = None) -> None:
        """Stop the loop (running `before_stop` on it first), join the thread, finish what is still pending on
        it, close the loop. From the call on, `running` is False: nothing new is taken."""
        with self._stop_lock:  # two threads stopping at once: the second finds the work done
            self._stopping = True
            if self.loop.is_running():
                if before_stop is not None:
                    self.loop.call_soon_threadsafe(before_stop)
                self.loop.call_soon_threadsafe(self.loop.stop)
            if self._thread.is_alive() and not self.on_loop_thread():
                self._thread.join(timeout=5)
            if not self._thread.is_alive() and not self.loop.is_closed():
                self._finish_pending()
                self.loop.close()

    def _finish_pending(self) -> None:
        """Cancel the tasks still pending on the stopped loop and let them finish (as asyncio.run does): a task
        a timer started just before the stop (a crossing message's resend) would otherwise be destroyed pending,
        which asyncio logs as an error. Bounded: a task that swallows its cancellation must not hold up the
        stop. Skipped on a thread whose own event loop is running (the loop cannot run there)."""
        try:
            asyncio.get_running_loop()
            return
        except RuntimeError:
            pass
        for _ in range(3):  # a task cancelled may start another
            pending = [task for task in asyncio.all_tasks(self.loop) if not task.done()]
            if not pending:
                return
            for task in pending:
                task.cancel()
            done, _ = self.loop.run_until_complete(asyncio.wait(pending, timeout=2.0))
            for task in done:  # retrieved here, or asyncio reports "exception was never retrieved"
                if not task.cancelled() and task.exception() is not None:
                    log.debug("a pending task failed while cancelled at stop", error=repr(task.exception()))


def _log_failure(future: concurrent.futures.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        exc = future.exception()
        log.warning("bus operation failed", error=f"{type(exc).__name__}: {exc}")


async def cancel_task(task: asyncio.Task) -> None:
    """Cancel `task` and wait until it has finished."""
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass
