"""`mgrpo-node --health-file PATH`: a heartbeat file for supervisors' probes (Kubernetes liveness and
readiness, deploy/k8s/). While the node's roles run and its NATS connection is up, it writes the Unix
time into PATH every `every_s` seconds (atomically: a probe never reads half a file); on stop it
removes it. A probe passes while the file is younger than a few beats:

    test $(( $(date +%s) - $(cat PATH) )) -lt 30
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["HealthFile"]


class HealthFile:
    """Writes the time into `path` every `every_s` while `healthy()` says so."""

    def __init__(self, path: str, healthy: Callable[[], bool], every_s: float = 5.0) -> None:
        self.path, self.healthy, self.every_s = Path(path), healthy, every_s
        self._last = -float("inf")

    def beat(self) -> None:
        """Called often; writes at most every `every_s`, and only while healthy."""
        now = time.monotonic()
        if now - self._last < self.every_s or not self.healthy():
            return
        self._last = now
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(f"{int(time.time())}\n")
            os.replace(tmp, self.path)
        except OSError:  # a full or read-only disk: the probe fails, which is the point
            pass

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
