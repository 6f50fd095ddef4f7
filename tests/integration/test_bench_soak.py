"""`mgrpo bench soak --quick` (issue 8): valid load plus hostile traffic against two real tool nodes on a
real nats-server for 20 s. Every valid request is served (none lost: retries cover the nodes made deaf
half-way), the attacks are refused as dead letters, both nodes notice the deafening message and
reconnect, and their memory stays within the bound."""

from __future__ import annotations

import pytest

from mgrpo_actors.bench import soak

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_soak_quick_loses_no_valid_request_and_refuses_the_attacks(nats_server):
    results = soak.run(quick=True, url=nats_server.url)
    valid = results["valid"]
    assert valid["sent"] > 100 and valid["lost"] == 0 and valid["served"] == valid["sent"], valid
    assert results["unfinished_workers"] == 0
    hostile = results["hostile"]
    assert hostile["deafen"] == 1 and all(
        hostile[k] > 0
        for k in ("garbage", "bad_reply", "map_bomb", "oversize", "flood_requests", "raw_over_max_payload")
    )
    assert results["dead_letters"].get("BadReplySubject", 0) > 0 and results["dead_letters"].get("ProtocolError", 0) > 0
    assert all(m["reconnects"] >= 1 for m in results["memory"].values()), results["memory"]  # each noticed it was deaf
    assert results["memory_bounded"] and all(m["peak_mib"] > 0 for m in results["memory"].values())
