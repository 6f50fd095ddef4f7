"""BusLoop: stopping it finishes the tasks still pending (a resend's publish started by a timer just before the
stop), so none is destroyed pending, which asyncio would log as an error."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

from mgrpo_actors.runtime.loop import BusLoop


def test_stopping_cancels_and_finishes_pending_tasks(caplog):
    loop = BusLoop("test-bus-loop", "nowhere")
    loop.start()
    finished = []

    async def publish_forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            finished.append("cleaned up")

    def start_tasks() -> None:  # as a resend timer does: tasks created on the loop, nobody awaiting them
        for _ in range(3):
            loop.loop.create_task(publish_forever())

    loop.call_soon(start_tasks)
    deadline = time.monotonic() + 5
    while len(asyncio.all_tasks(loop.loop)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.stop()
        gc.collect()
    assert loop.closed
    assert finished == ["cleaned up"] * 3
    assert not [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]


def test_stopping_a_loop_with_nothing_pending():
    loop = BusLoop("test-bus-loop-idle", "nowhere")
    loop.start()
    loop.stop()
    assert loop.closed
