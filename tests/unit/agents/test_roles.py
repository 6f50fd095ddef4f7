"""The roles: which tools each agent is shown and may call, what S returns to M, and the opening messages."""

import json

import numpy as np

from mgrpo_actors.agents.delegation import DelegateTool, DelegationRequest, format_subtask_result
from mgrpo_actors.agents.engine_text import engine_text_generator
from mgrpo_actors.agents.episode import AgentEpisode
from mgrpo_actors.agents.main import main_episode
from mgrpo_actors.agents.prompts import MAIN_DEMONSTRATION, SUB_DEMONSTRATION
from mgrpo_actors.agents.single import single_episode
from mgrpo_actors.agents.sub import sub_episode, subtask_result
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call, parse_turn
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.engines import Generation, SamplingParams
from mgrpo_actors.rollout.driver import AgentModel
from protocols.messages import SubtaskResult
from tests.agent_helpers import small_web, tiny_tokenizer, web_tools
from tests.scripted_engine import ScriptedEngine

REQUEST = DelegationRequest(
    task="Who designed Skurfor 9?", context="It is a product.", rollout_index=1, call_id="r1.t2"
)


def prompt_text(episode: AgentEpisode) -> str:
    return tiny_tokenizer().decode(episode.next_prompt_ids())


def play(episode: AgentEpisode, *turns: tuple[str, str | None, bool]) -> None:
    """Feed scripted turns: (text, tool output or None for the last, tool ok)."""
    tokenizer = tiny_tokenizer()
    for text, output, ok in turns:
        ids = [*tokenizer(text)["input_ids"], tokenizer.eos_token_id]
        episode.apply(Generation(ids, np.zeros(len(ids), dtype=np.float32), "stop", 0))
        if output is not None:
            episode.add_tool_result(output, ok=ok)


def test_each_role_is_shown_and_allowed_its_own_tools():
    tools, tokenizer, cfg = web_tools(small_web()), tiny_tokenizer(), AgentConfig()
    main = main_episode("Q?", tokenizer, tools, cfg, rollout_index=0)
    sub = sub_episode(REQUEST, tokenizer, tools, cfg)
    single = single_episode("Q?", tokenizer, tools, cfg, rollout_index=0)
    assert (main.tool_names, sub.tool_names, single.tool_names) == (
        ("reason", "delegate"),
        ("search", "visit"),
        ("search", "visit", "reason"),
    )
    shown = {
        name: prompt_text(ep).split("</tools>")[0] for name, ep in (("main", main), ("sub", sub), ("single", single))
    }
    assert '"name": "delegate"' in shown["main"] and '"name": "reason"' in shown["main"]
    assert '"name": "search"' not in shown["main"] and '"name": "delegate"' not in shown["sub"]
    assert '"name": "visit"' in shown["single"] and '"name": "delegate"' not in shown["single"]


def test_s_reads_only_the_task_and_context_and_is_named_by_the_call_id():
    sub = sub_episode(REQUEST, tiny_tokenizer(), web_tools(small_web()), AgentConfig())
    assert (sub.episode_id, sub.rollout_index) == ("r1.t2", 1)
    assert prompt_text(sub).endswith(
        "<|im_start|>user\nTask: Who designed Skurfor 9?\n\nContext: It is a product.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_demonstrations_are_well_formed_turns_and_can_be_left_out():
    for demonstration in (MAIN_DEMONSTRATION, SUB_DEMONSTRATION):
        assistant_turns = [m["content"] for m in demonstration if m["role"] == "assistant"]
        assert assistant_turns and all(parse_turn(text).is_valid for text in assistant_turns)
        assert parse_turn(assistant_turns[-1]).kind == "answer"
    tools = web_tools(small_web())
    with_demo = main_episode("Q?", tiny_tokenizer(), tools, AgentConfig(), 0)
    without = main_episode("Q?", tiny_tokenizer(), tools, AgentConfig(demonstration=False), 0)
    assert "Castellan Bridge" in prompt_text(with_demo) and "Castellan Bridge" not in prompt_text(without)


def test_a_system_prompt_override_replaces_the_default():
    episode = main_episode("Q?", tiny_tokenizer(), web_tools(small_web()), AgentConfig(system_prompt="Be brief."), 0)
    assert prompt_text(episode).startswith("<|im_start|>system\nBe brief.<|im_end|>")


def test_a_json_answer_gives_findings_and_evidence():
    sub = sub_episode(REQUEST, tiny_tokenizer(), web_tools(small_web()), AgentConfig())
    answer = json.dumps(
        {"findings": "Skurfor 9 was designed by Talfal Dreingel.", "evidence": ["synth://wiki/skurfor-9", 7]}
    )
    play(sub, (format_answer(answer), None, True))
    assert subtask_result(sub.record()) == SubtaskResult(
        call_id="r1.t2",
        ok=True,
        findings="Skurfor 9 was designed by Talfal Dreingel.",
        evidence=["synth://wiki/skurfor-9"],
        num_turns=1,
    )


def test_a_plain_answer_is_the_findings_with_no_evidence_since_m_never_sees_what_s_read():
    sub = sub_episode(REQUEST, tiny_tokenizer(), web_tools(small_web()), AgentConfig())
    visit = lambda url: format_tool_call("visit", {"url": url, "goal": "designer"})  # noqa: E731
    play(
        sub,
        (visit("synth://wiki/skurfor-9"), "Title: Skurfor 9 ...", True),
        (visit("synth://wiki/nowhere"), "Error: cannot visit", False),
        (visit("synth://wiki/skurfor-9"), "Title: Skurfor 9 ...", True),
        (format_answer("Talfal Dreingel designed it."), None, True),
    )
    result = subtask_result(sub.record())
    assert (result.ok, result.findings, result.evidence) == (True, "Talfal Dreingel designed it.", [])
    assert "skurfor-9" not in format_subtask_result(result)


def test_no_answer_is_a_failed_result_that_says_why():
    sub = sub_episode(REQUEST, tiny_tokenizer(), web_tools(small_web()), AgentConfig(max_turns=2))
    search = format_tool_call("search", {"query": "Skurfor 9"})
    play(sub, (search, "Results ...", True), (search, None, True))
    result = subtask_result(sub.record())
    assert (result.ok, result.findings, result.evidence, result.num_turns) == (False, "", [], 2)
    assert result.error == "it stopped after 2 turns without an answer: it used its turn budget"
    assert format_subtask_result(result) == f"Error: the sub-agent returned no result ({result.error})"


def test_the_delegate_tool_is_for_prompts_and_validation_only():
    result = DelegateTool()({"task": "x"})
    assert not result.ok and "rollout driver" in result.error


def test_the_reasoning_model_answers_a_user_message_with_text():
    engine = ScriptedEngine(tiny_tokenizer(), lambda prompt: "Result: 42" if "6 * 7" in prompt else "?")
    generate = engine_text_generator(
        AgentModel(engine, tiny_tokenizer()), SamplingParams(temperature=0.0, max_new_tokens=16)
    )
    assert generate("What is 6 * 7?") == "Result: 42"
    ((prompts, params),) = engine.calls
    assert tiny_tokenizer().decode(prompts[0]).startswith("<|im_start|>user\nWhat is 6 * 7?")
    assert params.greedy
