"""Graceful stop on SIGINT/SIGTERM: the main thread waits on a ShutdownSignal (`wait_for_stop`); the node drains."""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType

from mgrpo_actors.runtime.health import HealthFile

__all__ = ["ShutdownSignal", "wait_for_stop"]


class ShutdownSignal:
    """Set by SIGINT or SIGTERM (or `set()`); a second signal restores the default handler."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name = ""

    def install(self) -> ShutdownSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name
        self._event.set()
        signal.signal(signum, signal.SIG_DFL)  # a second Ctrl-C kills at once

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._event.wait(timeout_s)


def wait_for_stop(stop: ShutdownSignal, duration_s: float | None, health: HealthFile | None = None) -> None:
    """Block until `stop` is set or `duration_s` passed (None: no limit), beating `health` meanwhile (removed after)."""
    deadline = time.monotonic() + duration_s if duration_s is not None else None
    try:
        while not stop.wait(0.2):
            if health is not None:
                health.beat()
            if deadline is not None and time.monotonic() >= deadline:
                return
    finally:
        if health is not None:
            health.remove()
