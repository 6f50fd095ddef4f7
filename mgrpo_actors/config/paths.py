"""Whether a path a config names is a regular file, and if not, what it is in words: `/dev/null` or a FIFO
exists yet holds no config, dataset or pages, and saying "does not exist" of it would mislead."""

from __future__ import annotations

import stat
from pathlib import Path

__all__ = ["not_a_regular_file"]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_regular_file(path: str | Path) -> str | None:
    """None for a regular file (or a link to one); else why not: "does not exist", "is a directory",
    "is a character device (not a regular file)", …"""
    p = Path(path).expanduser()
    if p.is_file():
        return None
    if not p.exists():
        return "does not exist"
    mode = p.stat().st_mode
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"is {kind}" if kind == "a directory" else f"is {kind} (not a regular file)"
