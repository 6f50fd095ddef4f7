"""A supervised warm-up's saved state, so an interrupted one resumes where it was rather than from step 1.

A warm-up of a model trained from scratch takes an hour or more on 2 CPU cores (docs/benchmarks.md); a machine
restarted, a session ended or a Ctrl-C would otherwise throw all of it away. Every `every_seconds` the loop
(supervised.py) writes everything its next steps depend on: the weights, AdamW's state, the lr schedule's, the
episode draws' random state, torch's and the losses so far. Loaded back, the loop takes the very steps it would
have taken, so the warmed weights equal an uninterrupted warm-up's bit for bit (with the same torch threads: their
count orders the float sums). The file is written whole, synced and renamed into place, so a kill mid-save leaves
the previous checkpoint; one unreadable all the same is dropped (that warm-up starts over). An interruption that
reaches the loop through its progress callback (Ctrl-C, `mgrpo warmup`'s SIGTERM) is saved first, whenever it is.

Who checkpoints must keep the checkpoint beside settings that cannot change under it: the model cache's builds
(cached.py) do, their directory being keyed by every setting the weights depend on.
"""

from __future__ import annotations

import io
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.disk import atomic_write_bytes

__all__ = ["WarmupProgress", "TrainingCheckpoint"]

log = get_logger(__name__)


@dataclass
class WarmupProgress:
    """Where a warm-up loop stands: `step` steps taken, their losses, their compute seconds (every attempt's), and
    the steps at which it resumed (empty for an uninterrupted warm-up)."""

    step: int = 0
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    resumed_at: list[int] = field(default_factory=list)


@dataclass
class TrainingCheckpoint:
    """The checkpoint file of one training loop and how often it is written."""

    path: Path
    every_seconds: float = 300.0  # at most this much compute is lost to an interruption; 0 = never saved
    _last_save: float = field(default_factory=time.perf_counter, init=False)

    def load(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        schedule: torch.optim.lr_scheduler.LRScheduler,
        draw: random.Random,
    ) -> WarmupProgress:
        """Restore the saved state into the loop's objects; where the loop stands (step 0 when there is no file)."""
        if not self.path.is_file():
            return WarmupProgress()
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # unreadable (a disk that failed mid-write): this side starts over rather than never
            log.warning("warm-up checkpoint unreadable: starting over", checkpoint=str(self.path), error=str(exc))
            self.path.unlink(missing_ok=True)
            return WarmupProgress()
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        draw.setstate(state["draw"])
        torch.set_rng_state(state["torch_rng"])
        steps, losses, seconds = state["step"], list(state["losses"]), float(state["seconds"])
        resumed = WarmupProgress(steps, losses, seconds, [*state["resumed_at"], steps])
        log.info("warm-up resumed", checkpoint=str(self.path), step=resumed.step)
        self._last_save = time.perf_counter()
        return resumed

    def due(self) -> bool:
        """Whether `every_seconds` have passed since the last save (or the load)."""
        return self.every_seconds > 0 and time.perf_counter() - self._last_save >= self.every_seconds

    def save(
        self,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        schedule: torch.optim.lr_scheduler.LRScheduler,
        draw: random.Random,
        progress: WarmupProgress,
    ) -> None:
        """Write the state after `step` steps (the next one to take is `step`), atomically and synced to disk. A
        failed write (a full disk) is logged and the warm-up goes on: the checkpoint is a safeguard, not its work."""
        state = {
            "step": step,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "draw": draw.getstate(),
            "torch_rng": torch.get_rng_state(),
            "losses": progress.losses,
            "seconds": progress.seconds,
            "resumed_at": progress.resumed_at,
        }
        serialised = io.BytesIO()
        torch.save(state, serialised)
        try:  # synced, renamed into place; a failed write leaves no partial file (runtime/disk.py)
            atomic_write_bytes(self.path, serialised.getbuffer(), "warm-up checkpoint")
        except OSError as exc:
            log.warning("warm-up checkpoint not written", checkpoint=str(self.path), error=str(exc))
        self._last_save = time.perf_counter()

    def remove(self) -> None:
        """The loop finished: its checkpoint is of no further use."""
        self.path.unlink(missing_ok=True)
