"""Answers across accounts come back within the deployment's reply window (issue 11): nats-server
forgets a service request's way back after the export's response_threshold and a responder's right to
answer after allow_responses' expiry (2 minutes each by default, while a subtask may take 5). Rendered
with `reply_window_s: 2`, a tool's answer after 0.5 s reaches the main agent across accounts; one
after 3.5 s does not (so the rendered window is what the server applies; the default is an hour)."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from protocols import Subjects
from tests.deploy_helpers import render, secure_server, user_security

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RUN_ID = "window"


async def _request(agent, subject: str, timeout: float):  # noqa: ANN001, ANN202
    """A request, sent again while the server has no responder for it yet: the tool's subscription reaches the
    main agent's account through the service import a moment after its flush (measured: NoRespondersError once in a
    full suite on 2 loaded cores). A request with no responder reaches no one, so nothing is answered twice."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            return await agent.request(subject, b"q", timeout=timeout)
        except nats.errors.NoRespondersError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _ask(url: str, out, delays: list[float]) -> list[bool]:  # noqa: ANN001
    """The tool's user answers each request after its delay; the main agent's user asks once per delay."""
    subject = Subjects(RUN_ID).tool("search")
    tool = await nats.connect(url, allow_reconnect=False, **user_security(out, "tool", url).nats_options())
    agent = await nats.connect(url, allow_reconnect=False, **user_security(out, "main-agent", url).nats_options())
    pending = list(delays)

    async def answer(msg) -> None:  # noqa: ANN001
        await asyncio.sleep(pending.pop(0))
        await msg.respond(b"found")

    try:
        await tool.subscribe(subject, cb=answer)
        await tool.flush()
        arrived = []
        for delay in delays:
            try:
                arrived.append((await _request(agent, subject, timeout=delay + 2.0)).data == b"found")
            except nats.errors.TimeoutError:
                arrived.append(False)
        return arrived
    finally:
        await agent.close()
        await tool.close()


def test_an_answer_across_accounts_arrives_within_the_reply_window_and_not_after(tmp_path):
    out = render(tmp_path, RUN_ID, reply_window_s=2)
    assert (
        'response_threshold: "2s"' in (out / "n1.conf").read_text() and 'expires: "2s"' in (out / "n1.conf").read_text()
    )
    server = secure_server(out)
    try:
        url = server.url.replace("nats://", "tls://")
        assert asyncio.run(_ask(url, out, [0.5, 3.5])) == [True, False]
    finally:
        server.stop()


async def _race(url: str, out) -> bytes:  # noqa: ANN001
    """A tool request seen by the tool (answering after 0.3 s) and by its account's tap user (answering at once):
    the answer the main agent gets."""
    from mgrpo_actors.deploy.server_config import tap_user

    subject = Subjects(RUN_ID).tool("search")
    users = {name: user_security(out, name, url).nats_options() for name in ("tool", tap_user("TOOLS"), "main-agent")}
    tool, tap, agent = [await nats.connect(url, allow_reconnect=False, **users[name]) for name in users]

    async def real(msg) -> None:  # noqa: ANN001
        await asyncio.sleep(0.3)
        await msg.respond(b"real")

    async def forged(msg) -> None:  # noqa: ANN001
        await msg.respond(b"forged")

    try:
        await tool.subscribe(subject, cb=real)
        await tap.subscribe(subject, cb=forged)
        await tool.flush()
        await tap.flush()
        return (await agent.request(subject, b"q", timeout=5.0)).data
    finally:
        for connection in (agent, tap, tool):
            await connection.close()


def test_a_tap_user_that_sees_a_request_cannot_answer_it(tmp_path):
    out = render(tmp_path, RUN_ID)
    server = secure_server(out)
    try:
        url = server.url.replace("nats://", "tls://")
        assert asyncio.run(_race(url, out)) == b"real"  # the tap's answer, first, was refused by the server
    finally:
        server.stop()
