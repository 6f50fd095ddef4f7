"""Issue 8, finding 4: every stream of a run had no size cap (and kept 7 days); one flood of dead
letters took 35 MB. Now each has a cap from the node config: the request and batch streams refuse new
messages when full (the publisher gets an error, a bus failure: a handler that meets it hands its
message back and it comes again), so no unprocessed work is discarded; the others drop their oldest."""

from __future__ import annotations

import pytest
from nats.js import api as js_api

from mgrpo_actors.runtime import is_transient
from mgrpo_actors.runtime.jetstream import StreamLimits
from protocols import DeadLetter, Metric

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

MIB = 1 << 20


def test_observability_streams_drop_the_oldest_and_work_streams_refuse_new_messages_when_full(bus):
    bus.ensure_streams(["dlq", "batch-main"], StreamLimits(max_age_s=3600, work_max_bytes=MIB, observability_max_bytes=MIB))
    dlq, batches = bus.stream_info(bus.subjects.stream("dlq")), bus.stream_info(bus.subjects.stream("batch-main"))
    assert (dlq.config.max_bytes, dlq.config.discard) == (MIB, js_api.DiscardPolicy.OLD)
    assert (batches.config.max_bytes, batches.config.discard) == (MIB, js_api.DiscardPolicy.NEW)
    assert dlq.config.max_age == batches.config.max_age == 3600

    letter = DeadLetter(subject="s", reason="flood", error_type="X", payload=b"\x00" * 100_000)
    for _ in range(30):  # 3 MB into a 1 MiB stream
        bus.js_publish(bus.subjects.dlq("mgrpo.x.flood"), letter)
    kept = bus.stream_info(bus.subjects.stream("dlq")).state
    assert kept.bytes <= MIB and 0 < kept.messages < 30  # the oldest went, the newest are there

    metric = Metric(name="filler", value=1.0, tags={"pad": "x" * 100_000})
    refused = 0
    for i in range(30):
        try:
            bus.js_publish(bus.subjects.batches("main"), metric, msg_id=f"fill-{i}")
        except Exception as exc:  # the server's "maximum bytes exceeded": a bus failure, so actors hand back and retry
            assert is_transient(exc), exc
            refused += 1
    full = bus.stream_info(bus.subjects.stream("batch-main")).state
    assert refused > 0 and full.bytes <= MIB and full.messages == 30 - refused  # none of the stored ones dropped
