"""Polling with deadlines (no fixed sleeps) and running the project's console scripts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def venv_script(name: str) -> Path:
    """A console script of the project's venv (`.venv/bin/NAME`), else the one beside this Python."""
    for candidate in (REPO / ".venv" / "bin" / name, Path(sys.executable).parent / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(
        f"{name} not found in {REPO / '.venv' / 'bin'} nor beside {sys.executable}: run `make install`"
    )


def subprocess_env() -> dict[str, str]:
    """Environment for the project's console scripts run as subprocesses."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("NATS_URL", None)
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)  # a learner run in the test process must not hand its process group to others
    return env


def wait_until(
    predicate: Callable[[], Any], timeout_s: float = 10.0, interval_s: float = 0.02, what: str | Callable[[], str] = ""
) -> Any:
    """Poll `predicate` until it returns something truthy (returned) or fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"condition not met within {timeout_s:g} s: {detail or predicate}")
        time.sleep(interval_s)


def run_script(
    name: str, *args: str, timeout_s: float = 30.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run `.venv/bin/NAME ARGS...` to completion (text output captured) from the repo root; `env` adds variables."""
    return subprocess.run(
        [str(venv_script(name)), *args],
        cwd=REPO,
        env={**subprocess_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def start_script(
    name: str, *args: str, env: dict[str, str] | None = None, stdout: Any = subprocess.PIPE
) -> subprocess.Popen:
    """Start `.venv/bin/NAME ARGS...` in the background with piped text output (or into `stdout`)."""
    return subprocess.Popen(
        [str(venv_script(name)), *args],
        cwd=REPO,
        env={**subprocess_env(), **(env or {})},
        stdout=stdout,
        stderr=subprocess.STDOUT if stdout is not subprocess.PIPE else subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Terminate a process this test started (by its own handle) if it is still running."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def closed_port_url() -> str:
    """A nats:// URL on a loopback port that nothing listens on (bound once by us, then closed)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"nats://127.0.0.1:{port}"


def learned_samples(out: str) -> dict[str, int]:
    """Side -> samples its learner trained on over a run, summed from the run view's learner lines
    ("main learner: version 1, loss …, 4 samples, 0.3 s") of `out` (spaces collapsed or not)."""
    import re

    totals: dict[str, int] = {}
    for side, samples in re.findall(
        r"\b([a-z][a-z0-9_]*) learner: version \d+, loss [^,]*, clip fraction [^,]*, (\d+) samples", out
    ):
        totals[side] = totals.get(side, 0) + int(samples)
    return totals


def expected_trained_line(out: str, sides: tuple[str, ...], learners: tuple[str, ...]) -> str:
    """The run's closing "trained: …" line as it must read given what its learners reported in `out`."""
    from mgrpo_actors.cli.run import trained_line

    return trained_line(sides, learners, learned_samples(out))


def stored_messages(run_dir: Path) -> dict[str, int]:
    """Messages per stream (short names: "traj-main", …) of a finished `mgrpo run`'s embedded store
    (<run.dir>/<run.id>), read by starting a nats-server on it as the run's user."""
    import asyncio

    import nats

    from mgrpo_actors.runtime import EmbeddedNats
    from mgrpo_actors.runtime.run_credentials import run_credentials

    credentials = run_credentials(run_dir)
    prefix = f"mgrpo-{run_dir.name}-"

    async def counts(url: str) -> dict[str, int]:
        nc = await nats.connect(url, user=credentials.user, password=credentials.password)
        try:
            infos = await nc.jetstream().streams_info()
            return {
                i.config.name.removeprefix(prefix): i.state.messages for i in infos if i.config.name.startswith(prefix)
            }
        finally:
            await nc.close()

    with EmbeddedNats(store_dir=str(run_dir / "nats"), credentials=credentials) as server:
        return asyncio.run(counts(server.url))
