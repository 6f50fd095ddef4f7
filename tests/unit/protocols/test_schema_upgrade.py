"""Messages an earlier build stored (schema version 1: one sub-agent type, `sub_version`) decode as this version's,
so a run started before the upgrade resumes (its KV and streams hold version 1 messages)."""

from __future__ import annotations

import msgpack
import pytest

from protocols import SCHEMA_VERSION, ProtocolError, RolloutRequest, StepPlan, WeightsVersion, decode

V1_REQUEST = {
    "run_id": "r",
    "step": 3,
    "query_id": "q",
    "question": "?",
    "answers": ["a"],
    "num_rollouts": 2,
    "main_version": 3,
    "sub_version": 2,
}
V1_PLAN = {"run_id": "r", "step": 3, "query_ids": ["q"], "num_rollouts": 2, "main_version": 3, "sub_version": 2}


def _wire(version: int, type_name: str, fields: dict) -> bytes:
    return msgpack.packb({"v": version, "t": type_name, "ts": 1.0, "d": fields}, use_bin_type=True)


def test_a_version_1_rollout_request_and_plan_name_the_default_types_version():
    request = decode(_wire(1, "RolloutRequest", V1_REQUEST))
    assert isinstance(request, RolloutRequest) and request.sub_versions == {"sub": 2} and request.main_version == 3
    plan = decode(_wire(1, "StepPlan", V1_PLAN))
    assert isinstance(plan, StepPlan) and plan.sub_versions == {"sub": 2}


def test_a_version_1_message_of_an_unchanged_type_decodes_as_it_was():
    fields = {"run_id": "r", "side": "sub", "version": 4, "step": 3, "uri": "weights-sub/v4"}
    assert decode(_wire(1, "WeightsVersion", fields)) == WeightsVersion(**fields)


def test_this_version_does_not_take_the_old_field():
    with pytest.raises(ProtocolError, match="RolloutRequest.sub_version"):
        decode(_wire(SCHEMA_VERSION, "RolloutRequest", V1_REQUEST))


@pytest.mark.parametrize("version", [0, SCHEMA_VERSION + 1])
def test_versions_this_build_does_not_know_are_refused(version):
    with pytest.raises(ProtocolError, match="unknown schema version"):
        decode(_wire(version, "StepPlan", V1_PLAN))
