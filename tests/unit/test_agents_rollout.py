"""run_rollouts and run_single_agent_rollouts with scripted engines: the loop logic end to end and the
reward parts of every rollout and sub call (m-grpo.md §Rewards)."""

import dataclasses
import json

import pytest

from mgrpo_actors.agents.config import AgentConfig
from mgrpo_actors.agents.driver import AgentModel
from mgrpo_actors.agents.rollout import RolloutConfig, run_rollouts, run_single_agent_rollouts
from mgrpo_actors.agents.scoring import expert_references
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.envs.qa import Question
from tests.agent_helpers import lookup_question, main_script, small_web, sub_script, tiny_tokenizer, web_tools
from tests.scripted_engine import ScriptedEngine, by_turn

AGENT = AgentConfig(max_turns=4, max_new_tokens_per_turn=128)
CFG = RolloutConfig(main=AGENT, sub=AGENT)


def rollouts(main_engine, sub_engine, question, k=1, cfg=CFG):
    tokenizer = tiny_tokenizer()
    return run_rollouts(question, k, AgentModel(main_engine, tokenizer), AgentModel(sub_engine, tokenizer),
                        web_tools(small_web()), cfg, seed=0)  # fmt: skip


def test_a_correct_rollout_with_one_delegation_gets_full_rewards():
    question = lookup_question()
    group = rollouts(main_script(question, question.answer), sub_script(question), question, k=2)
    assert len(group.rollouts) == 2
    for index, rollout in enumerate(group.rollouts):
        assert rollout.index == index and rollout.main.answer == question.answer
        m = rollout.main_score
        assert (m.format.ok, m.r_format, m.r_correct, m.reward) == (True, 1.0, 1.0, pytest.approx(1.0))
        (call,) = rollout.sub_calls
        assert call.request.call_id == f"r{index}.t0" and call.request.task == question.question
        assert call.episode.episode_id == f"r{index}.t0" and call.result.ok
        assert question.evidence[0].fact in call.result.findings
        (s,) = rollout.sub_scores
        assert (s.call_id, s.r_format, s.main_correct, s.r_expert) == (f"r{index}.t0", 1.0, 1.0, 1.0)
        assert s.reward == pytest.approx(0.1 + 0.4 + 0.5)
        page = call.episode.turns[1].tool_result
        assert page.startswith("Title: ") and question.evidence[0].urls[0] in page
        m_context = tiny_tokenizer().decode(rollout.main.trajectory.token_ids.tolist())
        assert page not in m_context and call.episode.turns[0].tool_result not in m_context  # M never sees S's transcript
        assert json.loads(rollout.main.turns[0].tool_result)["evidence"] == list(question.evidence[0].urls)
    assert group.sub_stats.turns == 6 and group.main_stats.turns == 4


def test_a_wrong_answer_costs_m_its_correctness_and_s_the_copied_part():
    question = lookup_question()
    group = rollouts(main_script(question, "no idea"), sub_script(question), question)
    (rollout,) = group.rollouts
    assert (rollout.main_score.r_correct, rollout.main_score.reward) == (0.0, pytest.approx(0.1))
    (s,) = rollout.sub_scores
    assert (s.main_correct, s.r_expert, s.reward) == (0.0, 1.0, pytest.approx(0.1 + 0.5))


def test_every_delegation_is_a_sub_call_of_its_rollout():
    question = lookup_question()
    group = rollouts(main_script(question, question.answer, delegations=2), sub_script(question), question, k=2)
    for rollout in group.rollouts:
        assert [c.request.call_id for c in rollout.sub_calls] == [f"r{rollout.index}.t0", f"r{rollout.index}.t1"]
        assert [s.call_id for s in rollout.sub_scores] == [c.request.call_id for c in rollout.sub_calls]
        assert all(c.request.rollout_index == rollout.index for c in rollout.sub_calls)


def test_without_an_expert_rule_beta3_is_folded_into_beta2():
    question = lookup_question()
    cfg = dataclasses.replace(CFG, expert_rule=False)
    group = rollouts(main_script(question, question.answer), sub_script(question), question, cfg=cfg)
    assert group.sub_weights.expert_folded
    (s,) = group.rollouts[0].sub_scores
    assert s.r_expert is None and s.reward == pytest.approx(0.1 + 0.9)


def test_a_rollout_without_delegation_has_no_sub_calls():
    question = lookup_question()
    group = rollouts(ScriptedEngine(tiny_tokenizer(), by_turn(format_answer("x"))), sub_script(question), question)
    assert group.rollouts[0].sub_calls == () and group.sub_stats.turns == 0


def test_a_malformed_sub_agent_gets_no_reward_but_m_still_can():
    question = lookup_question()
    sub = ScriptedEngine(tiny_tokenizer(), by_turn("I will not use the format."))
    group = rollouts(main_script(question, question.answer), sub, question)
    (rollout,) = group.rollouts
    (s,) = rollout.sub_scores
    assert (s.r_format, s.reward) == (0.0, 0.0) and not s.format.ok
    assert rollout.main_score.reward == pytest.approx(1.0)
    assert rollout.main.turns[0].tool_result.startswith("Error: the sub-agent returned no result")


def test_the_single_agent_baseline_uses_every_tool_itself():
    question = lookup_question()
    (chain,) = question.evidence
    engine = ScriptedEngine(tiny_tokenizer(), by_turn(
        format_tool_call("search", {"query": chain.subject}),
        format_tool_call("visit", {"url": chain.urls[0], "goal": "the fact"}),
        format_answer(question.answer),
    ))  # fmt: skip
    group = run_single_agent_rollouts(question, 2, AgentModel(engine, tiny_tokenizer()), web_tools(small_web()), CFG, seed=0)
    assert group.sub_weights is None
    for rollout in group.rollouts:
        assert rollout.sub_calls == () and rollout.main.answer == question.answer
        assert rollout.main_score.reward == pytest.approx(1.0)
        assert rollout.main.turns[0].tool_result.startswith(f"Results for {chain.subject!r}")


def test_expert_references_are_the_facts_and_the_entities_the_question_does_not_name():
    lookup = lookup_question()
    assert expert_references(lookup) == [lookup.evidence[0].fact]
    chain = next(q for q in small_web().splits["train"] if q.kind == "chain" and q.hops >= 2)
    references = expert_references(chain)
    assert references[0] == chain.evidence[0].fact
    assert chain.evidence[0].entities[0] not in references  # named in the question
    assert set(chain.evidence[0].entities[1:]) <= set(references)


def test_a_question_without_evidence_needs_the_expert_folded():
    question = Question(id="ext-1", question="What is 2 + 2?", answer="4")
    main = ScriptedEngine(tiny_tokenizer(), by_turn(format_answer("4")))
    with pytest.raises(ValueError, match="no evidence to score r_expert"):
        rollouts(main, main, question)
    group = rollouts(main, main, question, cfg=dataclasses.replace(CFG, expert_rule=False))
    assert group.rollouts[0].main_score.r_correct == 1.0


def test_k_must_be_positive():
    question = lookup_question()
    with pytest.raises(ValueError, match="k must be >= 1"):
        rollouts(main_script(question, "x"), sub_script(question), question, k=0)


def test_a_delegation_too_long_for_s_is_refused_without_running_s():
    question = lookup_question()
    delegate = format_tool_call("delegate", {"task": question.question, "context": "ö" * 3000})
    main = ScriptedEngine(tiny_tokenizer(), by_turn(delegate, format_answer(question.answer)))
    tight = RolloutConfig(main=AgentConfig(max_turns=3, max_new_tokens_per_turn=8192, max_context_tokens=40000),
                          sub=AgentConfig(max_turns=3, max_new_tokens_per_turn=128, max_context_tokens=2048))  # fmt: skip
    group = rollouts(main, sub_script(question), question, cfg=tight)
    (rollout,) = group.rollouts
    assert rollout.sub_calls == () and group.sub_stats.turns == 0
    assert rollout.main.turns[0].tool_result.startswith("Error: the sub-agent returned no result (episode r0.t0: the opening prompt has")
    assert rollout.main_score.reward == pytest.approx(1.0)
