"""M's rollouts in a run with several sub-agent types (mgrpo_actors/rollout/main.py): each rollout's RewardStats go
to every type, sharing R_M and r_correct, each listing only that type's calls whose trajectory is on its side; a
failed query reports to every type (the single agent: to none); QueryDone counts the calls of every type.

M is scripted (tests/scripted_engine.py); its delegations go to a recording Delegate, not over NATS."""

from __future__ import annotations

from collections.abc import Sequence

from mgrpo_actors.agents.delegation import Delegates, DelegationRequest
from mgrpo_actors.agents.main import main_tools
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import AgentModel, registry_executor
from mgrpo_actors.rollout.main import QueryOutcome, failed_outcome, run_main_rollouts
from mgrpo_actors.rollout.subtasks import Answered
from protocols import RolloutRequest, SubtaskResult
from tests.agent_helpers import small_web, tiny_tokenizer, web_tools
from tests.scripted_engine import ScriptedEngine, by_turn

TWO = Delegates.of({"searcher": None, "calculator": "computes"})
REQUEST = RolloutRequest(
    run_id="r",
    step=1,
    query_id="q1",
    question="How many years apart were they built?",
    answers=["42"],
    num_rollouts=2,
    main_version=0,
    sub_versions={"searcher": 0, "calculator": 0},
)
# Every rollout: turn 0 to the searcher, turns 1 and 2 to the calculator, then the answer.
M_TURNS = (
    format_tool_call("delegate_searcher", {"task": "When were both built?"}),
    format_tool_call("delegate_calculator", {"task": "1990 - 1948"}),
    format_tool_call("delegate_calculator", {"task": "42 + 0"}),
    format_answer("42"),
)


class RecordingDelegate:
    """The Delegate BusSubtasks is, without a bus: answers every call, records which wire call answered it (a
    retry's id for the calls in `retried`) and whether its sub-agent published a trajectory (not for those in
    `no_trajectory`)."""

    def __init__(self, delegates: Delegates, retried: set[str] = frozenset(), no_trajectory: set[str] = frozenset()):
        self.delegates = delegates
        self.requests: dict[str, RolloutRequest] = {}
        self.answered: dict[str, Answered] = {}
        self.retried, self.no_trajectory = retried, no_trajectory
        self.calls: list[DelegationRequest] = []

    def _tail(self, call_id: str) -> str:
        return call_id.split(".", 1)[1]  # "r<k>.t<n>" of "<attempt>.r<k>.t<n>"

    def __call__(self, delegations: Sequence[DelegationRequest]) -> list[SubtaskResult]:
        self.calls.extend(delegations)
        for d in delegations:
            wire = f"{d.call_id}~1" if self._tail(d.call_id) in self.retried else d.call_id
            self.answered[d.call_id] = Answered(wire, self._tail(d.call_id) not in self.no_trajectory)
        return [SubtaskResult(call_id=d.call_id, ok=True, findings="42") for d in delegations]


def _roll_out(subtasks: RecordingDelegate) -> QueryOutcome:
    tokenizer = tiny_tokenizer()
    tools = main_tools(web_tools(small_web()))
    model = AgentModel(ScriptedEngine(tokenizer, by_turn(*M_TURNS)), tokenizer)
    cfg = RolloutConfig(main=AgentConfig(max_turns=5))
    (outcome,) = run_main_rollouts([REQUEST], model, tools, cfg, subtasks, registry_executor(tools), seed=0)  # type: ignore[arg-type]
    return outcome


def test_each_delegation_went_to_the_type_of_the_tool_m_called():
    subtasks = RecordingDelegate(TWO)
    outcome = _roll_out(subtasks)
    by_rollout = [[(d.call_id, d.sub_type) for d in subtasks.calls if d.rollout_index == k] for k in range(2)]
    attempt = outcome.attempt
    assert by_rollout[1] == [
        (f"{attempt}.r1.t0", "searcher"),
        (f"{attempt}.r1.t1", "calculator"),
        (f"{attempt}.r1.t2", "calculator"),
    ]


def test_stats_per_type_list_only_that_types_calls():
    subtasks = RecordingDelegate(TWO)
    outcome = _roll_out(subtasks)
    a = outcome.attempt
    assert list(outcome.stats) == ["searcher", "calculator"]
    assert [s.sub_call_ids for s in outcome.stats["searcher"]] == [[f"{a}.r0.t0"], [f"{a}.r1.t0"]]
    assert [s.sub_call_ids for s in outcome.stats["calculator"]] == [
        [f"{a}.r0.t1", f"{a}.r0.t2"],
        [f"{a}.r1.t1", f"{a}.r1.t2"],
    ]
    assert [s.num_sub_calls for s in outcome.stats["calculator"]] == [2, 2]
    for per_type in outcome.stats.values():
        assert [s.rollout_index for s in per_type] == [0, 1]
        assert all((s.attempt, s.query_id, s.step, s.failed) == (a, "q1", 1, False) for s in per_type)


def test_the_types_share_m_reward_and_correctness():
    outcome = _roll_out(RecordingDelegate(TWO))
    searcher, calculator = outcome.stats["searcher"], outcome.stats["calculator"]
    for s, c, trajectory in zip(searcher, calculator, outcome.trajectories, strict=True):
        assert (s.reward_main, s.r_format, s.r_correct) == (c.reward_main, c.r_format, c.r_correct)
        assert (s.r_correct, s.r_format) == (trajectory.r_correct, trajectory.r_format)
    assert searcher[0].r_correct == 1.0  # "42" is the gold answer


def test_a_types_ids_are_the_wire_calls_with_a_trajectory():
    subtasks = RecordingDelegate(TWO, retried={"r0.t2"}, no_trajectory={"r1.t1", "r1.t0"})
    outcome = _roll_out(subtasks)
    a = outcome.attempt
    assert [s.sub_call_ids for s in outcome.stats["calculator"]] == [[f"{a}.r0.t1", f"{a}.r0.t2~1"], [f"{a}.r1.t2"]]
    assert [s.sub_call_ids for s in outcome.stats["searcher"]] == [[f"{a}.r0.t0"], []]
    assert [s.num_sub_calls for s in outcome.stats["searcher"]] == [1, 0]


def test_query_done_counts_the_calls_of_every_type():
    outcome = _roll_out(RecordingDelegate(TWO, no_trajectory={"r1.t1"}))
    assert outcome.done.sub_calls == 1 + 2 + 1 + 1  # r0: searcher 1, calculator 2; r1: searcher 1, calculator 1
    assert (outcome.done.num_rollouts, outcome.done.correct_rollouts, outcome.done.reward_mean) == (
        2,
        2,
        outcome.stats["calculator"][0].reward_main,
    )


def test_one_type_reports_to_sub_as_before():
    one = Delegates.of({"sub": None})
    turns = (format_tool_call("delegate", {"task": "When were both built?"}), format_answer("42"))
    tokenizer = tiny_tokenizer()
    tools = main_tools(web_tools(small_web()))
    model = AgentModel(ScriptedEngine(tokenizer, by_turn(*turns)), tokenizer)
    (outcome,) = run_main_rollouts(
        [REQUEST], model, tools, RolloutConfig(), RecordingDelegate(one), registry_executor(tools), seed=0
    )
    assert list(outcome.stats) == ["sub"]
    assert [s.sub_call_ids for s in outcome.stats["sub"]] == [[f"{outcome.attempt}.r{k}.t0"] for k in range(2)]
    assert outcome.done.sub_calls == 2


def test_the_single_agent_reports_to_no_type_yet_counts_its_correct_rollouts():
    tokenizer = tiny_tokenizer()
    tools = web_tools(small_web())
    model = AgentModel(ScriptedEngine(tokenizer, by_turn(format_answer("42"))), tokenizer)
    (outcome,) = run_main_rollouts([REQUEST], model, tools, RolloutConfig(), None, registry_executor(tools), seed=0)
    assert outcome.stats == {}
    assert (outcome.done.sub_calls, outcome.done.correct_rollouts) == (0, 2)
    assert outcome.done.reward_mean > 0 and all(t.r_correct == 1.0 for t in outcome.trajectories)


# ---- failed_outcome -------------------------------------------------------------------------------------------


def test_a_failed_query_reports_failed_stats_to_every_type():
    outcome = failed_outcome(REQUEST, "a9", "engine down", "node-1", ("searcher", "calculator"))
    assert list(outcome.stats) == ["searcher", "calculator"]
    for per_type in outcome.stats.values():
        assert [s.rollout_index for s in per_type] == [0, 1]
        assert all(s.failed and s.sub_call_ids == [] and s.reward_main == 0.0 and s.attempt == "a9" for s in per_type)
    assert outcome.done.failed_rollouts == 2 and outcome.done.sub_calls == 0
    assert all(t.failed and t.side == "main" for t in outcome.trajectories)


def test_a_failed_query_of_the_single_agent_reports_to_no_type():
    outcome = failed_outcome(REQUEST, "a9", "engine down", "node-1", ())
    assert outcome.stats == {}
    assert len(outcome.trajectories) == 2 and outcome.done.failed_rollouts == 2
