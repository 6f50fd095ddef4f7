"""run_episodes: one batched generate per step, tool calls batched to the executor, delegations batched to
the delegate callback with their payload, and every answer fed back as a masked tool message."""

import json

import numpy as np
import pytest

from mgrpo_actors.agents.delegation import DelegationRequest, format_subtask_result
from mgrpo_actors.agents.main import main_episode
from mgrpo_actors.agents.single import single_episode
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.rollout.driver import registry_executor, run_episodes, step_seed
from protocols.messages import SubtaskResult
from tests.agent_helpers import small_web, tiny_tokenizer, web_tools
from tests.scripted_engine import ScriptedEngine, by_turn

CFG = AgentConfig(max_turns=4, max_new_tokens_per_turn=128)
DELEGATE = format_tool_call("delegate", {"task": "Find who founded Aldora.", "context": "Aldora is a city."})


class RecordingDelegate:
    """A Delegate that answers every request with fixed findings and remembers what it was asked."""

    def __init__(self):
        self.batches: list[list[DelegationRequest]] = []

    def __call__(self, requests):
        self.batches.append(list(requests))
        return [
            SubtaskResult(call_id=r.call_id, ok=True, findings=f"{r.task} Galen.", evidence=["synth://wiki/aldora"])
            for r in requests
        ]


def main_episodes(k: int):
    tools = web_tools(small_web())
    return [main_episode("Who founded Aldora?", tiny_tokenizer(), tools, CFG, index) for index in range(k)]


def test_delegations_reach_the_callback_batched_with_their_payload_and_come_back_masked():
    tokenizer = tiny_tokenizer()
    engine = ScriptedEngine(tokenizer, by_turn(DELEGATE, format_answer("Galen")))
    delegate = RecordingDelegate()
    episodes = main_episodes(k=2)
    run_episodes(episodes, engine, registry_executor(web_tools(small_web())), delegate=delegate, seed=0)

    assert delegate.batches == [
        [
            DelegationRequest(
                task="Find who founded Aldora.", context="Aldora is a city.", rollout_index=0, call_id="r0.t0"
            ),
            DelegationRequest(
                task="Find who founded Aldora.", context="Aldora is a city.", rollout_index=1, call_id="r1.t0"
            ),
        ]
    ]
    for index, episode in enumerate(episodes):
        record = episode.record()
        expected = format_subtask_result(
            SubtaskResult(
                call_id=f"r{index}.t0",
                ok=True,
                findings="Find who founded Aldora. Galen.",
                evidence=["synth://wiki/aldora"],
            )
        )
        assert record.turns[0].tool_result == expected
        assert json.loads(expected) == {
            "findings": "Find who founded Aldora. Galen.",
            "evidence": ["synth://wiki/aldora"],
        }
        ids, mask = record.trajectory.token_ids, record.trajectory.loss_mask
        assert tokenizer.decode(ids[mask == 1].tolist(), skip_special_tokens=True) == DELEGATE + format_answer("Galen")
        (start, end), _ = record.trajectory.turn_spans
        result_ids = ids[end : record.trajectory.turn_spans[1][0]]
        assert (
            expected in tokenizer.decode(result_ids.tolist())
            and not mask[end : record.trajectory.turn_spans[1][0]].any()
        )
        assert record.answer == "Galen"


def test_each_step_is_one_generate_call_over_every_running_episode():
    engine = ScriptedEngine(tiny_tokenizer(), by_turn(DELEGATE, format_answer("Galen")))
    stats = run_episodes(
        main_episodes(k=3), engine, registry_executor(web_tools(small_web())), delegate=RecordingDelegate()
    )
    assert [len(prompts) for prompts, _ in engine.calls] == [3, 3]
    assert (stats.steps, stats.turns) == (2, 6)
    tokenizer = tiny_tokenizer()
    # The tiny tokenizer's closing tags are single ids: the engine stops on them, before an eos.
    per_episode = sum(len(tokenizer(text)["input_ids"]) for text in (DELEGATE, format_answer("Galen")))
    assert stats.generated_tokens == 3 * per_episode


def test_tool_calls_are_batched_to_the_executor_and_their_results_come_back():
    tools = web_tools(small_web())
    page = small_web().pages[0]
    calls_seen = []

    def executor(calls):
        calls_seen.append([call.name for call in calls])
        return registry_executor(tools)(calls)

    visit = format_tool_call("visit", {"url": page.url, "goal": "read it"})
    engine = ScriptedEngine(tiny_tokenizer(), by_turn(visit, format_answer("done")))
    episodes = [single_episode("q?", tiny_tokenizer(), tools, CFG, index) for index in range(2)]
    run_episodes(episodes, engine, executor)
    assert calls_seen == [["visit", "visit"]]
    for episode in episodes:
        first = episode.record().turns[0]
        assert first.tool_ok and first.tool_result.startswith(f"Title: {page.title}\nURL: {page.url}")


def test_a_tool_the_agent_does_not_have_gets_an_error_and_reaches_no_executor():
    def executor(calls):
        raise AssertionError(f"executor called with {calls}")

    search = format_tool_call("search", {"query": "Aldora"})
    engine = ScriptedEngine(tiny_tokenizer(), by_turn(search, format_answer("Galen")))
    (episode,) = main_episodes(k=1)
    run_episodes([episode], engine, executor, delegate=RecordingDelegate())
    first = episode.record().turns[0]
    assert first.tool_result == "Error: unknown tool 'search'; known tools: reason, delegate"
    assert first.tool_ok is False


def test_invalid_delegate_arguments_are_answered_with_an_error_and_no_delegation():
    bad = format_tool_call("delegate", {"context": "no task"})
    engine = ScriptedEngine(tiny_tokenizer(), by_turn(bad, format_answer("Galen")))
    delegate = RecordingDelegate()
    (episode,) = main_episodes(k=1)
    run_episodes([episode], engine, registry_executor(web_tools(small_web())), delegate=delegate)
    assert delegate.batches == []
    assert (
        episode.record().turns[0].tool_result
        == "Error: invalid arguments for delegate: arguments: missing required field 'task'"
    )


def test_a_failed_delegation_tells_m_why():
    engine = ScriptedEngine(tiny_tokenizer(), by_turn(DELEGATE, format_answer("Galen")))

    def failing(requests):
        return [
            SubtaskResult(call_id=r.call_id, ok=False, findings="", error="it used its turn budget") for r in requests
        ]

    (episode,) = main_episodes(k=1)
    run_episodes([episode], engine, registry_executor(web_tools(small_web())), delegate=failing)
    first = episode.record().turns[0]
    assert first.tool_result == "Error: the sub-agent returned no result (it used its turn budget)"
    assert first.tool_ok is False


def test_m_calls_reason_through_the_executor():
    reason = format_tool_call("reason", {"problem": "What is 6 * 7?"})
    engine = ScriptedEngine(tiny_tokenizer(), by_turn(reason, format_answer("42")))
    (episode,) = main_episodes(k=1)
    run_episodes([episode], engine, registry_executor(web_tools(small_web(), reason_reply="Result: 42")))
    assert episode.record().turns[0].tool_result == "Result: 42"


@pytest.mark.parametrize("answers", [0, 2])
def test_a_delegate_answering_the_wrong_number_of_requests_is_an_error(answers):
    engine = ScriptedEngine(tiny_tokenizer(), by_turn(DELEGATE, format_answer("Galen")))

    def delegate(requests):
        return [SubtaskResult(call_id=requests[0].call_id, ok=True, findings="x")] * answers

    with pytest.raises(RuntimeError, match=f"answered {answers} of 1 delegations"):
        run_episodes(main_episodes(k=1), engine, registry_executor(web_tools(small_web())), delegate=delegate)


def test_delegating_without_a_delegate_callback_is_an_error():
    engine = ScriptedEngine(tiny_tokenizer(), by_turn(DELEGATE, format_answer("Galen")))
    with pytest.raises(ValueError, match="no delegate callback"):
        run_episodes(main_episodes(k=1), engine, registry_executor(web_tools(small_web())))


def test_sampling_follows_the_agent_config_and_each_step_gets_its_own_seed():
    engine = ScriptedEngine(tiny_tokenizer(), by_turn(DELEGATE, format_answer("Galen")))
    run_episodes(
        main_episodes(k=1), engine, registry_executor(web_tools(small_web())), delegate=RecordingDelegate(), seed=7
    )
    params = [p for _, p in engine.calls]
    assert [(p.temperature, p.top_p, p.top_k, p.max_new_tokens) for p in params] == [(1.0, 1.0, 0, 128)] * 2
    assert [p.seed for p in params] == [step_seed(step_seed(7, 0), 0), step_seed(step_seed(7, 1), 0)]
    assert len({p.seed for p in params}) == 2
    assert step_seed(None, 3) is None and step_seed(7, 0) == step_seed(7, 0) != step_seed(8, 0)
    assert np.iinfo(np.uint32).max >= step_seed(7, 0) >= 0
