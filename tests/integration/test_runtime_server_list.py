"""A node given several server URLs (a cluster) connects while one of them is a host that accepts TCP
but never speaks NATS: nats-py tries the servers one by one, each for `nats.connect_timeout_s`, so the
connect's budget covers them all (a dead first server used to fail the whole connect)."""

from __future__ import annotations

import socket
import time

import pytest

from mgrpo_actors.runtime import Bus

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_silent_servers_in_the_list_do_not_stop_the_connect(nats_server, run_id):
    silent = [socket.socket() for _ in range(2)]
    for s in silent:
        s.bind(("127.0.0.1", 0))
        s.listen(16)  # the kernel accepts; nobody ever sends INFO
    try:
        url = ",".join([*(f"nats://127.0.0.1:{s.getsockname()[1]}" for s in silent), nats_server.url])
        slowest = 0.0
        for _ in range(6):  # nats-py shuffles the list: both silent servers come first in 1 of 3 tries
            started = time.monotonic()
            with Bus(url, run_id=run_id, node="listed", connect_timeout_s=1.0) as bus:
                assert bus.connected
            slowest = max(slowest, time.monotonic() - started)
        assert slowest < 4.5  # at most one connect timeout per silent server, then the real one
        print(f"slowest connect with 2 silent servers of 3: {slowest:.2f} s")
    finally:
        for s in silent:
            s.close()
