"""An audit log of what a process received: one JSON line per delivered message (subject, message
type, side for side-bound messages, size). It shows which messages reached which process, e.g. that
a sub-side process never received a main-side trajectory (docs/architecture.md §Sides and what crosses them).
Off unless `log.deliveries_dir` is set: the decode costs the bus thread a few microseconds per message.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from protocols import ProtocolError, decode

__all__ = ["DeliveryLog"]


class DeliveryLog:
    """Appends to `<dir>/<node>.jsonl` (thread-safe)."""

    def __init__(self, directory: str | Path, node: str, max_bytes: int) -> None:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / f"{node}.jsonl"
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def record(self, subject: str, data: bytes, how: str) -> None:
        """how: "subscription", "stream" or "reply"."""
        try:
            message = decode(data, self._max_bytes)
            kind, side = type(message).__name__, getattr(message, "side", None)
        except ProtocolError:
            kind, side = "undecodable", None
        line = json.dumps({"subject": subject, "how": how, "type": kind, "side": side, "bytes": len(data)})
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()
