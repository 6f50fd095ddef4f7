"""A message that crosses accounts is sent again with its de-duplication id (runtime/crossing.py), on a
real nats-server with two accounts where MAIN exports the stats subject to SUB: two messages are
published before SUB's stream exists (as when that stream has no leader for a moment); the one sent
with resends reaches SUB's stream once the stream is there, the other never does, and MAIN's stream
keeps each of them once."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from mgrpo_actors.runtime import Bus, EmbeddedNats
from mgrpo_actors.runtime.crossing import resend_later
from mgrpo_actors.runtime.security import ConnectSecurity
from protocols import Subjects

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

RUN_ID = "resend"
S = Subjects(RUN_ID)
# A backslash at a line's end joins it with the next: each account stays one line of the config.
ACCOUNTS = f"""
accounts {{
  MAIN: {{ jetstream: enabled, users: [{{user: main, password: main}}], \
exports: [{{stream: "{S.reward_stats}", accounts: ["SUB"]}}] }}
  SUB: {{ jetstream: enabled, users: [{{user: sub, password: sub}}], \
imports: [{{stream: {{account: "MAIN", subject: "{S.reward_stats}"}}}}] }}
}}
"""


async def _stream(url: str, user: str, create: bool) -> int:
    nc = await nats.connect(url, user=user, password=user)
    try:
        js = nc.jetstream()
        if create:
            await js.add_stream(name=S.stream("stats"), subjects=[S.reward_stats], duplicate_window=3600)
        return (await js.stream_info(S.stream("stats"))).state.messages
    finally:
        await nc.close()


async def _first(url: str, user: str) -> bytes:
    nc = await nats.connect(url, user=user, password=user)
    try:
        return (await nc.jetstream().get_msg(S.stream("stats"), 1)).data
    finally:
        await nc.close()


def test_a_resent_crossing_reaches_a_stream_that_missed_it_once_and_nothing_else_does():
    server = EmbeddedNats(extra_config=ACCOUNTS).start()
    try:
        asyncio.run(_stream(server.url, "main", create=True))
        with Bus(server.url, run_id=RUN_ID, node="main", security=ConnectSecurity(user="main", password="main")) as bus:
            bus.js_publish(S.reward_stats, b"sent once", msg_id="once")
            bus.js_publish(S.reward_stats, b"sent again", msg_id="again")
            # not beyond the duplicate window
            assert resend_later(bus, S.reward_stats, b"sent again", "again", after_s=(1.0, 2.0, 3.0, 7200.0)) == 3
            asyncio.run(_stream(server.url, "sub", create=True))  # SUB's stream comes after both first publishes
            deadline = time.monotonic() + 10
            while asyncio.run(_stream(server.url, "sub", create=False)) < 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(3.0)  # the remaining resends: duplicates everywhere
            assert asyncio.run(_stream(server.url, "sub", create=False)) == 1
            assert asyncio.run(_first(server.url, "sub")) == b"sent again"
            assert asyncio.run(_stream(server.url, "main", create=False)) == 2
    finally:
        server.stop()
