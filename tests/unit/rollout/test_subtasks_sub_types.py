"""M's Delegate over NATS with several sub-agent types (mgrpo_actors/rollout/subtasks.py `BusSubtasks`): each
delegation goes to its type's subject, naming its type's policy version; answers are recorded per M call id.
request_all (the runtime's send-and-retry) is replaced by a recorder: no bus, no server."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mgrpo_actors.agents.delegation import Delegates, DelegationRequest
from mgrpo_actors.rollout import subtasks as subtasks_module
from mgrpo_actors.rollout.calls import CallOutcome, CallStats
from mgrpo_actors.rollout.subtasks import Answered, BusSubtasks
from protocols import RolloutRequest, Subjects, SubtaskRequest, SubtaskResult

TWO = Delegates.of({"searcher": None, "calculator": "computes"})
ROLLOUT = RolloutRequest(
    run_id="r",
    step=3,
    query_id="q7",
    question="How many years apart?",
    answers=["12"],
    num_rollouts=2,
    main_version=5,
    sub_versions={"searcher": 2, "calculator": 9},
)


class Sent:
    """Stands in for request_all: keeps each call's subject and its first two attempts' requests, and answers
    every call with a result of the first attempt's call id."""

    def __init__(self, has_trajectory: bool = True):
        self.has_trajectory = has_trajectory
        self.subjects: list[str] = []
        self.first: list[SubtaskRequest] = []
        self.retry: list[SubtaskRequest] = []

    def __call__(self, bus, subjects, make_request, timeout_s, retries):
        self.subjects = list(subjects)
        self.first = [make_request(i, 0) for i in range(len(subjects))]
        self.retry = [make_request(i, 1) for i in range(len(subjects))]
        return [
            CallOutcome(
                SubtaskResult(call_id=r.call_id, ok=True, findings=r.task, has_trajectory=self.has_trajectory),
                None,
                1,
                0.01,
            )
            for r in self.first
        ]


def _delegation(call: str, sub_type: str, rollout_index: int = 0) -> DelegationRequest:
    return DelegationRequest(
        task=f"task of {call}", context="", rollout_index=rollout_index, call_id=f"a1.{call}", sub_type=sub_type
    )


def _subtasks(monkeypatch, sent: Sent, versions: dict[str, int] | None = None) -> BusSubtasks:
    monkeypatch.setattr(subtasks_module, "request_all", sent)
    bus = SimpleNamespace(subjects=Subjects("r", ("searcher", "calculator")))
    subtasks = BusSubtasks(
        bus,  # type: ignore[arg-type]
        timeout_s=5.0,
        retries=1,
        stats=CallStats(),
        sub_versions=lambda: dict(ROLLOUT.sub_versions if versions is None else versions),
        delegates=TWO,
    )
    subtasks.requests = {"a1": ROLLOUT}
    return subtasks


def test_each_delegation_goes_to_its_types_subject(monkeypatch):
    sent = Sent()
    subtasks = _subtasks(monkeypatch, sent)
    subtasks([_delegation("r0.t0", "calculator"), _delegation("r0.t1", "searcher"), _delegation("r1.t0", "calculator")])
    assert sent.subjects == [
        "mgrpo.r.subtask.request.calculator",
        "mgrpo.r.subtask.request.searcher",
        "mgrpo.r.subtask.request.calculator",
    ]


def test_each_request_names_its_types_policy_version(monkeypatch):
    sent = Sent()
    subtasks = _subtasks(monkeypatch, sent)
    subtasks([_delegation("r0.t0", "calculator"), _delegation("r1.t0", "searcher", rollout_index=1)])
    assert [r.sub_version for r in sent.first] == [9, 2]
    assert [r.sub_version for r in sent.retry] == [9, 2]
    first = sent.first[1]
    assert (first.run_id, first.step, first.query_id, first.rollout_index) == ("r", 3, "q7", 1)
    assert [r.call_id for r in sent.first] == ["a1.r0.t0", "a1.r1.t0"]
    assert [r.call_id for r in sent.retry] == ["a1.r0.t0~1", "a1.r1.t0~1"]


def test_the_versions_are_read_when_the_batch_is_sent(monkeypatch):
    sent, versions = Sent(), {"searcher": 2, "calculator": 9}
    subtasks = _subtasks(monkeypatch, sent, versions)
    versions["calculator"] = 10  # a new calculator policy arrived before this turn batch
    subtasks([_delegation("r0.t0", "calculator")])
    assert [r.sub_version for r in sent.first] == [10]


def test_answers_are_recorded_per_m_call_id_and_returned_under_it(monkeypatch):
    sent = Sent(has_trajectory=False)
    subtasks = _subtasks(monkeypatch, sent)
    results = subtasks([_delegation("r0.t0", "calculator"), _delegation("r0.t1", "searcher")])
    assert [r.call_id for r in results] == ["a1.r0.t0", "a1.r0.t1"]
    assert subtasks.answered == {
        "a1.r0.t0": Answered("a1.r0.t0", has_trajectory=False),
        "a1.r0.t1": Answered("a1.r0.t1", has_trajectory=False),
    }
    assert subtasks.stats.take()["subtask.calls"] == 2.0


@pytest.mark.parametrize(
    ("sub_type", "problem"),
    [("sub", "side 'sub' is invalid: expected one of main, searcher, calculator"), ("main", "main side has no sub")],
)
def test_a_delegation_to_a_side_without_sub_agents_in_the_run_is_refused(monkeypatch, sub_type, problem):
    subtasks = _subtasks(monkeypatch, Sent())
    with pytest.raises(ValueError, match=problem):
        subtasks([_delegation("r0.t0", sub_type)])
