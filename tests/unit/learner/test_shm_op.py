"""DeepSpeed's shm op is loaded under a lock the kernel releases (learner/shm_op.py): a lock file that a
killed loader left behind is removed instead of stalling every later learner (as it stalled a CI run's
`make install` for 87 minutes), and a loader killed while it holds our lock does not hold it after death."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mgrpo_actors.learner.shm_op import BATON, LOADER_LOCK, build_directory, loader_lock, remove_stale_baton

pytestmark = pytest.mark.timeout(180)

HOLD_LOCK = """
import sys, time
from pathlib import Path
from mgrpo_actors.learner.shm_op import loader_lock
with loader_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_lock_file_is_removed_and_said_and_none_is_no_error(tmp_path: Path) -> None:
    (tmp_path / BATON).touch()
    assert remove_stale_baton(tmp_path) is True
    assert not (tmp_path / BATON).exists()
    assert remove_stale_baton(tmp_path) is False


def _free(directory: Path) -> bool:
    with open(directory / LOADER_LOCK, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def test_the_loader_lock_excludes_a_second_holder_and_dies_with_a_killed_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not _free(tmp_path)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    deadline = time.monotonic() + 10
    while not _free(tmp_path):
        assert time.monotonic() < deadline, "the lock outlived its killed holder"
        time.sleep(0.05)
    with loader_lock(tmp_path):
        assert not _free(tmp_path)
    assert _free(tmp_path)


def test_a_lock_file_left_in_the_real_build_directory_does_not_stall_the_load(monkeypatch) -> None:
    """The CI hang itself: torch's lock file present in the op's real build directory (made by `make install`),
    no process holding it. `python -m mgrpo_actors.learner.shm_op` (the Makefile's line) must finish."""
    # what build_directory would set anyway, here set (and unset after the test) by monkeypatch
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch-extensions"))
    directory = build_directory("deepspeed_shm_comm")
    with loader_lock(directory):  # no loader of ours is inside torch's build while we plant the file
        (directory / BATON).touch()
    done = subprocess.run(
        [sys.executable, "-m", "mgrpo_actors.learner.shm_op"], capture_output=True, text=True, timeout=150
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (directory / BATON).exists()
    assert "removed a lock file a killed process left" in done.stdout + done.stderr


def test_the_op_is_built_inside_the_python_environment_unless_told_otherwise(monkeypatch, tmp_path: Path) -> None:
    """Not torch's per-user cache, which every venv shares: there each venv's build.ninja replaces the other's
    (a 40 s rebuild whenever two venvs take turns) and one venv's stale lock file stalls them all."""
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    made = build_directory("mgrpo_test_op")
    made.rmdir()  # torch makes it; nothing of the test stays in the environment
    assert made == Path(sys.prefix) / "torch-extensions" / "mgrpo_test_op"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert build_directory("mgrpo_test_op") == tmp_path / "mgrpo_test_op"
