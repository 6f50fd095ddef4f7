"""run_rollouts and run_single_agent_rollouts with scripted engines: the loop logic end to end and the
reward parts of every rollout and sub call (docs/method.md §Rewards)."""

import dataclasses
import json
import socket
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from structlog.testing import capture_logs

from mgrpo_actors.agents.delegation import DelegationRequest
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.algo.config import JudgeConfig, RewardConfig
from mgrpo_actors.algo.judge import JudgeError, OpenAICompatibleJudge, Verdict
from mgrpo_actors.algo.rewards import resolve_sub_weights
from mgrpo_actors.algo.scorers import ContainsReferenceJudge
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.envs.dataset import load_questions
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import AgentModel
from mgrpo_actors.rollout.local import run_rollouts, run_single_agent_rollouts
from mgrpo_actors.rollout.local_subagents import SubCall
from mgrpo_actors.rollout.scoring import NO_EVIDENCE, expert_references, score_sub
from protocols.messages import SubtaskResult
from tests.agent_helpers import lookup_question, main_script, small_web, sub_script, tiny_tokenizer, web_tools
from tests.scripted_engine import ScriptedEngine, by_turn

AGENT = AgentConfig(max_turns=4, max_new_tokens_per_turn=128)
CFG = RolloutConfig(main=AGENT, sub=AGENT)


def rollouts(main_engine, sub_engine, question, k=1, cfg=CFG):
    tokenizer = tiny_tokenizer()
    return run_rollouts(
        question,
        k,
        AgentModel(main_engine, tokenizer),
        AgentModel(sub_engine, tokenizer),
        web_tools(small_web()),
        cfg,
        seed=0,
    )


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
        # M never sees S's transcript
        assert page not in m_context and call.episode.turns[0].tool_result not in m_context
        assert json.loads(rollout.main.turns[0].tool_result)["evidence"] == list(question.evidence[0].urls)
    assert group.sub_stats.turns == 6 and group.main_stats.turns == 4


def test_a_wrong_answer_costs_m_its_correctness_and_s_the_copied_part():
    question = lookup_question()
    group = rollouts(main_script(question, "no idea"), sub_script(question), question)
    (rollout,) = group.rollouts
    assert (rollout.main_score.r_correct, rollout.main_score.reward) == (0.0, pytest.approx(0.1))
    (s,) = rollout.sub_scores
    assert (s.main_correct, s.r_expert, s.reward) == (0.0, 1.0, pytest.approx(0.1 + 0.5))


def test_m_right_but_malformed_pays_s_nothing_for_m_correctness():
    # docs/method.md §Rewards: r_correct(M) in R_S is 0 when M's format is invalid.
    question = lookup_question()
    delegate = format_tool_call("delegate", {"task": question.question, "context": ""})
    main = ScriptedEngine(tiny_tokenizer(), by_turn("no format here", delegate, format_answer(question.answer)))
    (rollout,) = rollouts(main, sub_script(question), question).rollouts
    m = rollout.main_score
    assert (m.format.ok, m.r_correct, m.reward) == (False, 1.0, 0.0)
    (s,) = rollout.sub_scores
    assert (s.main_correct, s.r_expert, s.reward) == (0.0, 1.0, pytest.approx(0.1 + 0.4 * 0.0 + 0.5 * 1.0))


def _sub_call(task: str, findings: str, context: str = "") -> SubCall:
    episode = SimpleNamespace(turn_errors=(None, None), answer=findings)  # what format_check reads: well formed
    result = SubtaskResult(call_id="r0.t0", ok=True, findings=findings)
    return SubCall(DelegationRequest(task=task, context=context, rollout_index=0, call_id="r0.t0"), episode, result)


def test_the_local_expert_rule_pays_nothing_for_echoing_the_task():
    # The review's case: a failed subtask repeats the entity M wrote into its task.
    expert = (ContainsReferenceJudge(), ["Orlen Vasque", "Castor Bay"])
    weights = resolve_sub_weights(RewardConfig(), expert_configured=True)
    calls = [
        _sub_call("Where was Orlen Vasque born?", "I could not find where Orlen Vasque was born."),
        _sub_call("Where was Orlen Vasque born?", "Orlen Vasque was born in Castor Bay."),  # found a new entity
        _sub_call("Where was he born?", "He was born in Castor Bay.", context="He is Orlen Vasque of Castor Bay."),
    ]
    scores = score_sub(calls, [1.0, 1.0, 1.0], expert, weights, max_turns=4)
    assert [s.r_expert for s in scores] == [0.0, 1.0, 0.0]  # the context counts as given, like the task
    # R_S = 0.1·1 + 0.4·1 + 0.5·r_expert.
    assert [s.reward for s in scores] == pytest.approx([0.5, 1.0, 0.5])


def test_every_delegation_is_a_sub_call_of_its_rollout():
    question = lookup_question()
    group = rollouts(main_script(question, question.answer, delegations=2), sub_script(question), question, k=2)
    for rollout in group.rollouts:
        assert [c.request.call_id for c in rollout.sub_calls] == [f"r{rollout.index}.t0", f"r{rollout.index}.t1"]
        assert [s.call_id for s in rollout.sub_scores] == [c.request.call_id for c in rollout.sub_calls]
        assert all(c.request.rollout_index == rollout.index for c in rollout.sub_calls)


def test_without_an_expert_judge_beta3_is_folded_into_beta2():
    question = lookup_question()
    cfg = dataclasses.replace(CFG, expert=None)
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
    engine = ScriptedEngine(
        tiny_tokenizer(),
        by_turn(
            format_tool_call("search", {"query": chain.subject}),
            format_tool_call("visit", {"url": chain.urls[0], "goal": "the fact"}),
            format_answer(question.answer),
        ),
    )
    group = run_single_agent_rollouts(
        question, 2, AgentModel(engine, tiny_tokenizer()), web_tools(small_web()), CFG, seed=0
    )
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


def test_a_plain_jsonl_question_folds_beta3_for_itself_and_the_log_says_so_once(tmp_path):
    path = tmp_path / "benchmark.jsonl"
    path.write_text(json.dumps({"id": "ext-1", "question": "What is 2 + 2?", "answer": "4"}) + "\n")
    (question,) = load_questions(path)
    findings = json.dumps({"findings": "2 + 2 = 4", "evidence": []})
    sub = ScriptedEngine(tiny_tokenizer(), by_turn(format_answer(findings)))
    cfg = dataclasses.replace(CFG, rewards=RewardConfig(beta_correct=0.3, beta_expert=0.6))  # its own log-once key
    with capture_logs() as logs:
        groups = [rollouts(main_script(question, "4"), sub, question, cfg=cfg) for _ in range(2)]
    assert [entry["reason"] for entry in logs if entry["event"] == "sub_reward_expert_folded"] == [NO_EVIDENCE]
    for group in groups:
        assert group.sub_weights.expert_folded
        (s,) = group.rollouts[0].sub_scores
        assert (s.r_expert, s.main_correct, s.reward) == (None, 1.0, pytest.approx(0.1 + 0.9))
    lookup = lookup_question()  # the same configuration still scores questions with evidence by the expert judge
    group = rollouts(main_script(lookup, lookup.answer), sub_script(lookup), lookup, cfg=cfg)
    assert not group.sub_weights.expert_folded and group.rollouts[0].sub_scores[0].r_expert == 1.0


@dataclass
class TableJudge:
    """Scores each reference from a table and records what it was asked."""

    name: str
    table: dict[str, float]
    asked: list[tuple[str, str, str]] = field(default_factory=list)

    def score(self, question: str, response: str, reference: str) -> Verdict:
        self.asked.append((question, response, reference))
        return Verdict(score=self.table.get(reference, 0.0), judge=self.name)


def test_r_correct_and_r_expert_come_from_the_configured_judges():
    question = lookup_question()
    correct = TableJudge("half-right", {question.answer: 0.5})
    (reference,) = expert_references(question)
    expert = TableJudge("quarter-expert", {reference: 0.25})
    cfg = dataclasses.replace(CFG, correct=correct, expert=expert)
    group = rollouts(main_script(question, "close enough"), sub_script(question), question, cfg=cfg)
    (rollout,) = group.rollouts
    assert correct.asked == [(question.question, "close enough", answer) for answer in question.answers]
    assert expert.asked == [(question.question, rollout.sub_calls[0].result.findings, reference)]
    assert (rollout.main_score.r_correct, rollout.main_score.reward) == (0.5, pytest.approx(0.1 + 0.9 * 0.5))
    (s,) = rollout.sub_scores
    assert (s.main_correct, s.r_expert, s.reward) == (0.5, 0.25, pytest.approx(0.1 + 0.4 * 0.5 + 0.5 * 0.25))


class FailingJudge:
    name = "down"

    def score(self, question: str, response: str, reference: str) -> Verdict:
        raise JudgeError("judge at http://judge/v1 failed")


def test_a_failing_judge_is_an_error_unless_it_has_an_explicit_fallback():
    question = lookup_question()
    with pytest.raises(JudgeError, match="judge at http://judge/v1 failed"):
        rollouts(
            main_script(question, question.answer),
            sub_script(question),
            question,
            cfg=dataclasses.replace(CFG, expert=FailingJudge()),
        )
    with socket.socket() as probe:  # a loopback port with nobody listening: the judge cannot connect
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cfg = JudgeConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=5, fallback_score=0.0)
    judge = OpenAICompatibleJudge(cfg)
    group = rollouts(
        main_script(question, question.answer),
        sub_script(question),
        question,
        cfg=dataclasses.replace(CFG, expert=judge),
    )
    (s,) = group.rollouts[0].sub_scores
    assert (s.r_expert, s.reward) == (0.0, pytest.approx(0.1 + 0.4))


def test_judges_must_follow_the_judge_protocol():
    with pytest.raises(TypeError, match="correct judge must follow algo.judge.Judge"):
        RolloutConfig(correct="exact-match")
    with pytest.raises(TypeError, match="expert judge must follow algo.judge.Judge or be None"):
        RolloutConfig(expert=lambda *args: 1.0)


def test_k_must_be_positive():
    question = lookup_question()
    with pytest.raises(ValueError, match="k must be >= 1"):
        rollouts(main_script(question, "x"), sub_script(question), question, k=0)


def test_a_delegation_too_long_for_s_is_refused_without_running_s():
    question = lookup_question()
    delegate = format_tool_call("delegate", {"task": question.question, "context": "ö" * 3000})
    main = ScriptedEngine(tiny_tokenizer(), by_turn(delegate, format_answer(question.answer)))
    tight = RolloutConfig(
        main=AgentConfig(max_turns=3, max_new_tokens_per_turn=8192, max_context_tokens=40000),
        sub=AgentConfig(max_turns=3, max_new_tokens_per_turn=128, max_context_tokens=2048),
    )
    group = rollouts(main, sub_script(question), question, cfg=tight)
    (rollout,) = group.rollouts
    assert rollout.sub_calls == () and group.sub_stats.turns == 0
    assert rollout.main.turns[0].tool_result.startswith(
        "Error: the sub-agent returned no result (episode r0.t0: the opening prompt has"
    )
    assert rollout.main_score.reward == pytest.approx(1.0)
