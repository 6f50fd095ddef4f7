"""The embedded nats-server runs under a soft memory limit (nats.embedded_memory_limit_mib, GOMEMLIMIT): without
one its RSS grew ~80 % while a long run's streams filled to their caps (mgrpo bench storage). A GOMEMLIMIT the
user set wins; 0 sets none."""

from __future__ import annotations

from pathlib import Path

import pytest

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.runtime.embedded import EmbeddedNats
from mgrpo_actors.runtime.run_server import start_run_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _server_limit(server: EmbeddedNats) -> str | None:
    assert server._proc is not None
    environ = Path(f"/proc/{server._proc.pid}/environ").read_bytes().split(b"\0")
    found = [entry.split(b"=", 1)[1].decode() for entry in environ if entry.startswith(b"GOMEMLIMIT=")]
    return found[0] if found else None


@pytest.mark.parametrize(
    ("limit", "environment", "expected"), [(48, None, "48MiB"), (0, None, None), (48, "1GiB", "1GiB")]
)
def test_the_server_gets_the_limit_unless_the_user_set_one(monkeypatch, limit, environment, expected):
    if environment is None:
        monkeypatch.delenv("GOMEMLIMIT", raising=False)
    else:
        monkeypatch.setenv("GOMEMLIMIT", environment)
    with EmbeddedNats(memory_limit_mib=limit) as server:
        assert _server_limit(server) == expected


def test_a_runs_server_gets_the_configured_limit(monkeypatch, tmp_path):
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    nats = NodeConfig().nats
    assert nats.embedded_memory_limit_mib == 64
    server, _ = start_run_server(tmp_path / "run", False, nats.max_message_bytes, nats.embedded_memory_limit_mib)
    try:
        assert _server_limit(server) == "64MiB"
    finally:
        server.stop()
