"""`Ticker`: tells an actor a note every few seconds, so it checks its timeouts in its own thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from mgrpo_actors.runtime.targets import Target, tell

__all__ = ["Ticker"]


class Ticker:
    """Tells `target` the note `make_note()` every `interval_s` until stopped (or the target is gone)."""

    def __init__(self, target: Target, interval_s: float, make_note: Callable[[], Any], name: str = "ticker") -> None:
        self._target = target
        self._interval_s = interval_s
        self._make_note = make_note
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Ticker:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            if not tell(self._target, self._make_note()):
                return

    def stop(self) -> None:
        self._stop.set()
