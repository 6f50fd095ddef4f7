"""`mgrpo tap` line formatting (mgrpo_actors.cli.tap.message_to_json), without a network: one JSON
line per message, never an exception, whatever arrives."""

from __future__ import annotations

import json

import msgpack
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo_actors.cli.tap import Cut, message_to_json
from protocols import SCHEMA_VERSION, AlignedBatch, Metric, ToolRequest, encode
from tests.strategies import any_message


def strict_json(line: str) -> dict:
    """Parse as standard JSON (RFC 8259): NaN/Infinity are not JSON and break other consumers (jq, JS)."""

    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name} in {line[:200]}")

    return json.loads(line, parse_constant=refuse)


def test_a_message_becomes_one_json_line():
    line = message_to_json("mgrpo.r.metrics.loss", encode(Metric(name="loss", value=float("nan"), step=1)))
    assert "\n" not in line
    obj = strict_json(line)
    assert obj["subject"] == "mgrpo.r.metrics.loss" and obj["type"] == "Metric"
    assert obj["payload"]["value"] == "NaN"


def test_infinite_values_give_standard_json():
    # NaN is already written as "NaN"; infinities must not come out as the non-JSON `Infinity`.
    for value in (float("inf"), float("-inf")):
        obj = strict_json(message_to_json("s", encode(Metric(name="m", value=value))))
        assert obj["payload"]["value"] in ("Infinity", "-Infinity", "inf", "-inf", None)


def test_arrays_are_shown_as_dtype_and_shape():
    batch = AlignedBatch(
        run_id="r",
        side="main",
        step=0,
        batch_id="b",
        sample_ids=["s0", "s1"],
        lengths=np.array([2, 3], np.int32),
        token_ids=np.zeros(5, np.int32),
        loss_mask=np.ones(5, np.uint8),
        logprobs=np.zeros(5, np.float32),
        advantages=np.zeros(2, np.float32),
        weights=np.ones(2, np.float32),
        policy_versions=np.zeros(2, np.int32),
        rewards=np.zeros(2, np.float32),
        kinds=np.zeros(2, np.uint8),
        groups=np.zeros(2, np.int32),
        temperatures=np.ones(2, np.float32),
        top_ps=np.ones(2, np.float32),
        top_ks=np.zeros(2, np.int32),
    )
    payload = json.loads(message_to_json("s", encode(batch)))["payload"]
    assert payload["token_ids"] == {"dtype": "int32", "shape": [5]}
    assert payload["advantages"] == {"dtype": "float32", "shape": [2]}
    assert payload["sample_ids"] == ["s0", "s1"]


@settings(max_examples=150)
@given(any_message())
def test_every_message_type_gives_a_json_line(message):
    obj = strict_json(message_to_json("s", encode(message)))
    assert obj["type"] == type(message).__name__


@settings(max_examples=150)
@given(st.binary(max_size=200))
def test_garbage_gives_an_error_line(data):
    obj = json.loads(message_to_json("s", data))
    assert obj["subject"] == "s"
    assert "payload" in obj or "error" in obj


def test_a_send_time_out_of_range_still_gives_a_line():
    # The envelope's ts is any number on the wire; a tap must print the message (with its error or a
    # placeholder time), never raise (which in a live tap silently drops the line).
    raised = []
    for ts in (float("nan"), float("inf"), 1e300, -1e300):
        data = msgpack.packb(
            {"v": SCHEMA_VERSION, "t": "Metric", "ts": ts, "d": {"name": "m", "value": 1.0}}, use_bin_type=True
        )
        try:
            obj = strict_json(message_to_json("mgrpo.r.metrics.m", data))
        except Exception as exc:
            raised.append(f"ts={ts!r}: {type(exc).__name__}: {exc}")
            continue
        assert obj["subject"] == "mgrpo.r.metrics.m"
    assert not raised, "\n".join(raised)


def test_long_fields_are_cut_by_default_and_whole_when_asked():
    """Issue 8: a 900 KB field printed whole floods the terminal (8.5 MB for ~190 messages)."""
    huge = ToolRequest(
        call_id="c", tool="search", arguments={"query": "x" * 900_000, **{f"k{i}": "v" * 500 for i in range(999)}}
    )
    data = encode(huge)
    cut_line = message_to_json("s", data, Cut())
    payload = strict_json(cut_line)["payload"]
    assert len(cut_line) < 20_000
    assert payload["arguments"]["query"] == "x" * 200 + "… [+899800 chars]"
    assert len(payload["arguments"]) == 21 and payload["arguments"]["…"] == "[+980 items]"
    assert payload["arguments"]["k0"].endswith("… [+300 chars]")
    full = strict_json(message_to_json("s", data))["payload"]
    assert full["arguments"]["query"] == huge.arguments["query"] and len(full["arguments"]) == 1_000
