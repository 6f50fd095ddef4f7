"""M's delegate tools (issue 22, 1 + n): one `delegate` for the one sub-agent type, exactly as before; one
`delegate_<type>` per type otherwise, described from config; the driver sends each call to its type."""

from __future__ import annotations

import pytest

from mgrpo_actors.agents.delegation import DEFAULT_DESCRIPTION, ONE_TYPE, Delegates, DelegateTool, delegation_request
from mgrpo_actors.agents.main import main_episode, main_tools
from mgrpo_actors.agents.prompts import (
    MAIN_DEMONSTRATION,
    MAIN_ROLE,
    MAIN_ROLE_TYPES,
    main_demonstration,
    main_system_prompt,
)
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.rollout.driver import registry_executor, run_episodes
from protocols.messages import SubtaskResult
from tests.agent_helpers import small_web, tiny_tokenizer, web_tools
from tests.scripted_engine import ScriptedEngine, by_turn

TWO = Delegates.of({"searcher": None, "calculator": "does arithmetic on numbers you give it."})


def test_one_type_keeps_the_delegate_tool_and_prompt_it_had():
    assert ONE_TYPE.names == ("delegate",) and ONE_TYPE.types == {"delegate": "sub"}
    assert ONE_TYPE.tools[0].description == DEFAULT_DESCRIPTION == DelegateTool().description
    tools = main_tools(web_tools(small_web()))
    prompt = main_system_prompt(tools)
    assert prompt == main_system_prompt(tools, ONE_TYPE)
    assert prompt.startswith(MAIN_ROLE) and DEFAULT_DESCRIPTION in prompt and '"delegate"' in prompt
    assert MAIN_DEMONSTRATION == main_demonstration("delegate")


def test_several_types_get_a_tool_each_described_from_config():
    assert TWO.names == ("delegate_searcher", "delegate_calculator")
    assert TWO.types == {"delegate_searcher": "searcher", "delegate_calculator": "calculator"}
    searcher, calculator = TWO.tools
    assert searcher.description.startswith("Give a subtask to the searcher sub-agent: it can search and read web")
    assert calculator.description.startswith(
        "Give a subtask to the calculator sub-agent: does arithmetic on numbers you give it. It returns"
    )
    prompt = main_system_prompt(main_tools(web_tools(small_web())), TWO)
    assert prompt.startswith(MAIN_ROLE_TYPES)
    assert '"delegate_searcher"' in prompt and '"delegate_calculator"' in prompt and '"delegate"' not in prompt


def test_one_named_type_is_still_delegate_with_its_own_description():
    one = Delegates.of({"reader": "reads the pages you name."})
    assert one.names == ("delegate",) and one.types == {"delegate": "reader"}
    assert "the reader sub-agent: reads the pages you name. It returns" in one.tools[0].description


def test_no_type_is_refused():
    with pytest.raises(ValueError, match="at least one sub-agent type"):
        Delegates.of({})


def test_a_request_names_its_type_and_errors_name_the_tool_called():
    request = delegation_request({"task": "7 * 6"}, 1, "r1.t0", "calculator", "delegate_calculator")
    assert request.sub_type == "calculator" and request.task == "7 * 6" and request.context == ""
    assert delegation_request({"task": " "}, 0, "r0.t0", "calculator", "delegate_calculator") == (
        "invalid arguments for delegate_calculator: arguments.task: must not be blank"
    )


def test_ms_episode_lists_every_delegate_tool_and_its_example_calls_the_first():
    tokenizer = tiny_tokenizer()
    episode = main_episode("Q?", tokenizer, web_tools(small_web()), AgentConfig(), 0, delegates=TWO)
    assert set(TWO.names) <= set(episode.tool_names) and "delegate" not in episode.tool_names
    prompt = tokenizer.decode(episode.next_prompt_ids())
    example = format_tool_call("delegate_searcher", {"task": "When was Castellan Bridge built?", "context": ""})
    assert example in prompt and MAIN_ROLE_TYPES in prompt


def test_the_driver_sends_each_call_to_its_type_and_refuses_the_one_type_name():
    calls = {
        0: format_tool_call("delegate_calculator", {"task": "7 * 6"}),
        1: format_tool_call("delegate_searcher", {"task": "Who founded Aldora?"}),
        2: format_tool_call("delegate", {"task": "Who founded Aldora?"}),
    }
    tokenizer = tiny_tokenizer()
    seen = []

    def delegate(requests):
        seen.extend(requests)
        return [SubtaskResult(call_id=r.call_id, ok=True, findings="42") for r in requests]

    episodes = [
        main_episode("Q?", tokenizer, web_tools(small_web()), AgentConfig(max_turns=2), k, delegates=TWO)
        for k in range(3)
    ]
    scripts = [ScriptedEngine(tokenizer, by_turn(calls[k], format_answer("42"))) for k in range(3)]
    for episode, engine in zip(episodes, scripts, strict=True):
        run_episodes([episode], engine, registry_executor(web_tools(small_web())), delegate, seed=0, delegates=TWO)
    assert [(r.rollout_index, r.sub_type) for r in seen] == [(0, "calculator"), (1, "searcher")]
    refused = episodes[2].record().turns[0].tool_result
    assert refused.startswith("Error: unknown tool 'delegate'; known tools: reason, delegate_searcher")


def test_the_worked_example_delegates_to_the_first_type_that_reads_the_web():
    assert TWO.example == "delegate_searcher" and ONE_TYPE.example == "delegate"
    calculator_first = Delegates.of({"calculator": "computes.", "searcher": None}, readers=("searcher",))
    assert calculator_first.example == "delegate_searcher"
    none_reads = Delegates.of({"calculator": "computes.", "counter": "counts."}, readers=())
    assert none_reads.example is None
    tokenizer = tiny_tokenizer()
    episode = main_episode("Q?", tokenizer, web_tools(small_web()), AgentConfig(), 0, delegates=none_reads)
    assert "Castellan Bridge" not in tokenizer.decode(episode.next_prompt_ids())  # no worked example to copy
