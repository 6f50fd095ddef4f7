"""BusLoop: stopping it finishes the tasks still pending (a resend's publish started by a timer just before the
stop), so none is destroyed pending, which asyncio would log as an error."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time

import pytest

from mgrpo_actors.runtime import bus as bus_module
from mgrpo_actors.runtime.bus import Bus
from mgrpo_actors.runtime.errors import BusConnectError, BusError
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


def _started(name: str) -> BusLoop:
    loop = BusLoop(name, "nowhere")
    loop.start()
    return loop


def _wait_for_tasks(loop: BusLoop, n: int) -> None:
    deadline = time.monotonic() + 5
    while len(asyncio.all_tasks(loop.loop)) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_task_failing_as_it_is_cancelled_is_not_reported_unretrieved(caplog):
    loop = _started("test-bus-loop-raising")

    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise OSError("the transport is closed") from None

    loop.call_soon(lambda: loop.loop.create_task(fails_on_cancel()))
    _wait_for_tasks(loop, 1)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.stop()
        gc.collect()
    assert loop.closed
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage() or "pending" in r.getMessage()]


def test_stopping_from_a_thread_running_its_own_event_loop_still_closes():
    loop = _started("test-bus-loop-async-caller")
    loop.call_soon(lambda: loop.loop.create_task(asyncio.sleep(3600)))
    _wait_for_tasks(loop, 1)

    async def stop_from_async_code() -> None:
        loop.stop()

    asyncio.run(stop_from_async_code())
    assert loop.closed


def test_concurrent_stops_both_return_and_nothing_new_is_taken_once_stopping():
    loop = _started("test-bus-loop-concurrent")
    loop.call_soon(lambda: loop.loop.create_task(asyncio.sleep(3600)))
    _wait_for_tasks(loop, 1)
    stoppers = [threading.Thread(target=loop.stop) for _ in range(2)]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in stoppers)
    assert loop.closed and not loop.running
    assert loop.submit(asyncio.sleep(0)) is None  # refused, not left pending


class _SlowToStartLoop(BusLoop):
    """A loop whose thread is slow to reach run_forever, as on a loaded machine (the CI flake: a node's first
    submit found the loop not yet running, was refused, and the node died on `assert future is not None`)."""

    def _run(self) -> None:
        time.sleep(0.3)
        super()._run()


def test_start_returns_once_the_loop_runs_so_the_first_submit_is_taken():
    loop = _SlowToStartLoop("test-bus-loop-slow-start", "nowhere")
    loop.start()
    try:
        assert loop.running
        future = loop.submit(asyncio.sleep(0, result="taken"))
        assert future is not None and future.result(5) == "taken"
    finally:
        loop.stop()


def test_a_loop_that_does_not_start_in_time_is_an_error():
    loop = _SlowToStartLoop("test-bus-loop-too-slow", "nowhere")
    with pytest.raises(BusError, match="did not start within 0.1 s"):
        loop.start(timeout_s=0.1)
    loop.stop()  # the thread got the loop running after all: stopped and closed
    assert loop.closed


def test_starting_a_stopped_loop_fails_at_once():
    loop = BusLoop("test-bus-loop-restart", "nowhere")
    loop.start()
    loop.stop()
    began = time.monotonic()
    with pytest.raises(BusError, match="was stopped"):
        loop.start()
    assert time.monotonic() - began < 1.0


def test_a_stop_while_the_thread_starts_still_stops_and_closes_the_loop():
    loop = _SlowToStartLoop("test-bus-loop-stop-racing-start", "nowhere")
    starter = threading.Thread(target=loop.start)
    starter.start()
    time.sleep(0.05)  # the thread is alive, its loop not yet running
    began = time.monotonic()
    loop.stop()  # waits for the thread, whose loop stops as soon as it runs
    assert time.monotonic() - began < 3.0  # not the 5 s join of a loop left running
    starter.join(timeout=10)
    assert not starter.is_alive()
    assert not loop.loop.is_running() and loop.closed


def test_a_bus_whose_loop_does_not_start_fails_to_connect_as_a_connection_error(monkeypatch):
    """The node catches BusConnectError (exit code and embedded server stopped): a loop that does not start is one."""

    class NotInTime(_SlowToStartLoop):
        def start(self, timeout_s: float = 30.0) -> None:
            super().start(timeout_s=0.1)

    monkeypatch.setattr(bus_module, "BusLoop", NotInTime)
    bus = Bus("nats://127.0.0.1:1", run_id="loop-test", node="loop-test")
    with pytest.raises(BusConnectError, match="did not start within"):
        bus.connect()
