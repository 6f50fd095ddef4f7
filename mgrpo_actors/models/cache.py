"""Where built or converted models live, and how a directory is built exactly once.

`MGRPO_CACHE` overrides the root (default `~/.cache/mgrpo-actors`). A build writes into a private
temporary directory next to its target and renames it into place, so concurrent builders (parallel
test workers, several nodes on one host) never see a half-written model: the first rename wins and
the others discard their copy.

A long build (a warm-up of an hour or more) is `build_resumable` instead: it builds in one directory kept per target,
`.<name>.partial`, left in place when the build is interrupted, so the next call's build goes on from what the last
one saved there; a lock file lets one builder at a time in, the others wait for it and then find the target built.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["CACHE_ENV", "build_once", "build_resumable", "cache_root", "left_by_interrupted_build"]

CACHE_ENV = "MGRPO_CACHE"
# Written last into a finished build: a directory without it is never used.
_DONE_MARKER = ".complete"


def cache_root() -> Path:
    """The cache root directory (created on demand by `build_once`)."""
    return Path(os.environ.get(CACHE_ENV) or "~/.cache/mgrpo-actors").expanduser()


def build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """Return `target`, first running `build(tmp_dir)` and renaming tmp_dir to it if it is not built yet."""
    if (target / _DONE_MARKER).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp_dir)
        (tmp_dir / _DONE_MARKER).touch()
        if target.exists() and not (target / _DONE_MARKER).exists():
            shutil.rmtree(target)  # a leftover from an interrupted build of an older version
        os.rename(tmp_dir, target)
    except OSError:
        if not (target / _DONE_MARKER).exists():
            raise
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return target


def build_resumable(target: Path, build: Callable[[Path], object], waiting: Callable[[], None] | None = None) -> Path:
    """Return `target`, first running `build(partial_dir)` and renaming partial_dir to it if it is not built yet.
    partial_dir is `.<target name>.partial` beside it and outlives a failed or interrupted build: `build` is to
    resume from what it finds there (it must only find what a build of this very target saved). One builder at a
    time: a second one waits until the first is done, calling `waiting()` (if given) about once a second meanwhile
    (it may raise to stop waiting), and then returns `target`."""
    import fcntl  # POSIX: imported here so that build_once's users import this module anywhere

    if (target / _DONE_MARKER).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = _partial_dir(target)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if waiting is not None:
                    waiting()
                time.sleep(1.0)
        if (target / _DONE_MARKER).exists():  # built by the builder this one waited for
            return target
        partial.mkdir(exist_ok=True)
        (partial / _DONE_MARKER).unlink(missing_ok=True)
        build(partial)
        (partial / _DONE_MARKER).touch()
        if target.exists():
            shutil.rmtree(target)  # a leftover without the marker (an older version's interrupted build)
        os.rename(partial, target)
    return target


def _partial_dir(target: Path) -> Path:
    """Where `build_resumable` builds `target` (and what an interrupted build of it left)."""
    return target.parent / f".{target.name}.partial"


def left_by_interrupted_build(target: Path) -> bool:
    """Whether an interrupted `build_resumable` of `target` saved something the next build goes on from (an empty
    partial directory, of a build stopped before it saved anything, is not)."""
    partial = _partial_dir(target)
    return partial.is_dir() and any(partial.iterdir())
