"""What keeps a pipeline node honest when the bus or an actor fails, on a real nats-server: a handler
that fails because the bus did hands its message back (redelivered, not dead-lettered); an actor that
dies tells its node; an aligner that finds its step already published announces it again; streams a
node finds keep their settings."""

from __future__ import annotations

import threading

import pytest

from actors.main_aligner import MainAlignerActor
from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.runtime import Bus, BusActor, BusError, Delivery
from protocols import Metric, StepAligned, StepPlan, decode
from tests.helpers import wait_until

pytestmark = pytest.mark.integration


class Flaky(BusActor):
    """Fails its first delivery the way a lost NATS connection would, then handles normally."""

    role = "test"

    def __init__(self, bus: Bus, stream: str, seen: list) -> None:
        super().__init__(bus)
        self.stream, self.seen = stream, seen

    def on_start(self) -> None:
        super().on_start()
        self.consume(self.stream, "flaky")

    def handlers(self) -> dict:
        return {Metric: self.on_job}

    def on_job(self, job: Metric, delivery: Delivery) -> None:
        self.seen.append(delivery.num_delivered)
        if delivery.num_delivered == 1:
            raise BusError("KV request timed out (a passing failure)")


def test_a_handler_failing_because_of_the_bus_gets_its_message_again_not_a_dead_letter(bus, actors, run_id):
    stream = f"flaky-{run_id}"
    bus.add_stream(stream, [f"{stream}.>"])
    seen: list[int] = []
    ref = Flaky.start_ready(bus, stream, seen)
    actors.append(ref)
    bus.js_publish(f"{stream}.job", Metric(name="job", value=1.0))
    wait_until(lambda: seen == [1, 2], timeout_s=15, what=lambda: seen)
    assert ref.proxy().retried.get() == 1 and ref.proxy().dead_letters.get() == 0
    assert bus.dead_letter_total == 0


class Crashing(BusActor):
    role = "test"

    def on_note(self, note):  # noqa: ANN001, ANN201 - an error outside any handler
        raise RuntimeError(f"cannot handle {note!r}")


def test_an_actor_that_dies_tells_the_bus(bus):
    failed = threading.Event()
    reasons: list[str] = []
    bus.on_actor_failed = lambda name, error: (reasons.append(error), failed.set())
    ref = Crashing.start_ready(bus)
    ref.tell("boom")
    assert failed.wait(10) and "cannot handle 'boom'" in reasons[0]


def test_an_aligner_that_finds_its_step_published_announces_it_again(bus, actors, run_id):
    bus.ensure_streams()
    config = load_config(NodeConfig, None, [f"run.id={run_id}"])
    record = b'{"batch_id": "%s-main-step0", "num_samples": 4, "num_chunks": 1}' % run_id.encode()
    bus.kv(bus.subjects.bucket("state-main")).put("aligned.main.0", record)  # published before a crash
    ready: list[StepAligned] = []
    bus.subscribe(bus.subjects.step_aligned("main"), lambda d: ready.append(decode(d.data)))
    actors.append(MainAlignerActor.start_ready(bus, config))
    bus.js_publish(
        bus.subjects.step_start,
        StepPlan(run_id=run_id, step=0, query_ids=["q"], num_rollouts=2, main_version=0, sub_versions={"sub": 0}),
    )
    wait_until(lambda: ready, timeout_s=15)
    assert ready[0].step == 0 and ready[0].num_samples == 4 and ready[0].batch_id == f"{run_id}-main-step0"


def test_a_stream_a_node_finds_keeps_its_settings(make_bus, run_id):
    big = make_bus("first", max_bytes=8 * 1024 * 1024)
    big.ensure_streams(["batch-sub"])
    small = make_bus("second", max_bytes=1024 * 1024)
    small.ensure_streams(["batch-sub"])  # must not shrink what the run's messages may be
    assert big.stream_info(big.subjects.stream("batch-sub")).config.max_msg_size == 8 * 1024 * 1024
