"""Writing files when the disk may be full: a file appears whole under its name or not at all, and a full disk
is said in one line naming the path ("no space left on device"), whatever layer noticed it.

A full disk surfaces in many shapes: OSError ENOSPC (or EDQUOT, a quota) from Python's own writes, but a
RuntimeError from torch's zip writer ("[enforce fail at inline_container.cc:672] unexpected pos 3328 vs 3222")
when its short write is noticed later, or a nats-server that never comes up. `no_space_left` recognises the
errno, or else asks the filesystem whether the path's device is (nearly) out of space.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DiskFullError", "atomic_write_bytes", "atomic_write_text", "disk_full", "move_into", "no_space_left"]

# Below this many free bytes (or 1 % of a smaller device) a device counts as full when an error does not say
# why (a write of one more tensor, or a JetStream block, would not fit).
NEARLY_FULL_BYTES = 16 * 1024 * 1024


class DiskFullError(OSError):
    """A write failed because the device under `path` has no space left (its message names the path)."""


def _existing(path: Path) -> Path:
    """`path`, or its nearest existing parent (what statvfs can ask about)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def no_space_left(exc: BaseException, path: str | os.PathLike[str]) -> bool:
    """Whether `exc` (raised while writing under `path`) means the device is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if "No space left on device" in str(exc):  # a library's own error around the OS's (safetensors)
        return True
    try:
        usage = shutil.disk_usage(_existing(Path(path)))
    except OSError:
        return False
    return usage.free < min(NEARLY_FULL_BYTES, usage.total // 100)


def disk_full(what: str, path: str | os.PathLike[str]) -> DiskFullError:
    """The one-line error: `what` could not be written to `path`, no space left on device."""
    return DiskFullError(errno.ENOSPC, f"no space left on device: {what} not written to {path}")


@contextlib.contextmanager
def _written_beside(path: Path, what: str) -> Iterator[Path]:
    """A temporary name beside `path` to write the new file to, renamed to `path` once the block is done; on any
    failure it is removed, and a full disk raised as DiskFullError naming `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        yield partial
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        if no_space_left(exc, path):
            raise disk_full(what, path) from exc
        raise
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, what: str = "file", mode: int | None = None) -> Path:
    """`data` into `path` through a temporary name beside it and one rename: a reader sees the old file or
    the new one, never a part; on any failure the temporary file is removed (DiskFullError when the disk is
    full). `mode` (e.g. 0o600): the file has it from its first byte, whatever the umask; None: the umask's."""
    path = Path(path)
    with _written_beside(path, what) as partial:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666 if mode is None else mode)
        if mode is not None:
            os.fchmod(fd, mode)  # O_CREAT's mode is narrowed by the umask only, and a leftover file keeps its own
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str, what: str = "file", mode: int | None = None) -> Path:
    """atomic_write_bytes of `text` as UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"), what, mode)


def move_into(source: str | os.PathLike[str], target: str | os.PathLike[str], what: str = "file") -> Path:
    """Move the file `source` to `target`, which then appears whole or not at all: one rename on the same
    device; across devices (a shared weights directory on another filesystem than the scratch space, where a
    rename fails with EXDEV) a copy to a temporary name beside `target`, synced, renamed, and only then the
    source removed. On any failure nothing partial is left at `target` and the source stays (DiskFullError when
    the disk is full)."""
    source, target = Path(source), Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(source, target)
        return target
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    with _written_beside(target, what) as partial, open(source, "rb") as src, open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst, 4 * 1024 * 1024)
        dst.flush()
        os.fsync(dst.fileno())
    source.unlink()
    return target
