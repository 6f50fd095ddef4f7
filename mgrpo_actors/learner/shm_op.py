"""DeepSpeed's CPU all-reduce op (its shared-memory `shm_comm`), loaded once per process under a lock
the kernel lets go of when its holder dies, so that a killed process cannot stall every later learner.

Why: torch builds and loads JIT extensions behind a plain lock file (`torch.utils.file_baton`) that the
loader removes when done. A process killed while it holds that file (a learner killed during its start, a
test run or CI job cut off) leaves the file behind, and every later load waits on it forever; measured: a
CI run's `make install` hung 87 minutes on one left by a killed test run. Every load of ours first takes
an `flock` on a file beside it; holding that flock, a lock file that is still there belongs to no live
loader of ours, and is removed, with a warning. DeepSpeed keeps the loaded op per process
(`OpBuilder._loaded_ops`), so `deepspeed.init_distributed` then reuses it without touching the lock file.

The op is built inside the Python environment (`use_environment_build_root`), not in torch's per-user
cache. `python -m mgrpo_actors.learner.shm_op` builds it (`make install` does, once).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from mgrpo_actors.log import get_logger

__all__ = ["build_directory", "load_shm_op", "loader_lock", "remove_stale_baton", "use_environment_build_root"]

log = get_logger(__name__)

BATON = "lock"  # the name torch's _jit_compile gives its lock file in an extension's build directory
LOADER_LOCK = "mgrpo-loader.flock"


def use_environment_build_root() -> None:
    """Build torch extensions inside this Python environment (TORCH_EXTENSIONS_DIR = <sys.prefix>/torch-extensions)
    unless TORCH_EXTENSIONS_DIR is set or the environment is not writable. Why: torch's default is one per-user
    cache that every venv shares, and its build.ninja names one venv's DeepSpeed sources, so two venvs rebuild
    the op (~40 s) whenever they take turns (measured: a fresh clone's tests beside a checkout's run), and a
    lock file left there stalls every venv of that user. Set in os.environ, so processes started from this
    one build in the same place."""
    if "TORCH_EXTENSIONS_DIR" not in os.environ and os.access(sys.prefix, os.W_OK):
        os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(sys.prefix) / "torch-extensions")


def build_directory(name: str) -> Path:
    """The directory torch builds extension `name` in (use_environment_build_root first), made if missing:
    torch's own function, so the path is the one its loader locks."""
    from torch.utils.cpp_extension import _get_build_directory

    use_environment_build_root()
    return Path(_get_build_directory(name, verbose=False))


@contextlib.contextmanager
def loader_lock(directory: Path) -> Iterator[None]:
    """Held while one process of ours loads (and if need be builds) the extension in `directory`; the
    kernel drops it when the holder exits, however it exits."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOADER_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_stale_baton(directory: Path) -> bool:
    """Remove torch's lock file from `directory` if it is there; call only holding `loader_lock`, under
    which no loader of ours is inside torch's build. True if there was one."""
    baton = directory / BATON
    try:
        baton.unlink()
    except FileNotFoundError:
        return False
    log.warning("removed a lock file a killed process left; torch would wait on it forever", path=str(baton))
    return True


def load_shm_op():
    """DeepSpeed's shm_comm op for this process (None where DeepSpeed finds it incompatible), loaded under
    `loader_lock`; the first call in a process may build it (~25 s), later ones return DeepSpeed's copy."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    # DeepSpeed's build_shm_op, but quiet: it prints "built successfully" on every call, and init_distributed calls it
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return None
    directory = build_directory(builder.name)
    with loader_lock(directory):
        remove_stale_baton(directory)
        return builder.load()


if __name__ == "__main__":
    load_shm_op()
