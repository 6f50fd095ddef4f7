"""Where built or converted models live, and how a directory is built exactly once.

`MGRPO_CACHE` overrides the root (default `~/.cache/mgrpo-actors`). A build writes into a private
temporary directory next to its target and renames it into place, so concurrent builders (parallel
test workers, several nodes on one host) never see a half-written model: the first rename wins and
the others discard their copy.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["CACHE_ENV", "build_once", "cache_root"]

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
