"""Worked episodes on the synthetic web for the format warm-up (warmup.py), written by an oracle that
knows each question's evidence and run through the real agent loop.

`OracleEngine` is a RolloutEngine whose "samples" are the oracle's turns: M delegates a subtask per
evidence chain and answers the gold answer with what S found; S (and the single agent, for every chain)
searches the chain's subject, visits its page and answers. A turn longer than the call's max_new_tokens is
cut there, as an engine would cut it (finish "length"): the cut episode fails the format and is not kept.
Everything else is real: the rollouts are run by
rollout/local.py with the real tools (search and visit over the built-in web), budgets, prompts,
turn format and TrajectoryBuilder, so a demonstration holds exactly the ids a rollout would, tool
outputs and budget notes included, and it is scored like one: only rollouts the reward calls format
valid and correct (and, for S, format valid) are kept.

It works the questions whose every evidence chain reads one page, the named entity's own (`single_page`):
lookups (one chain: M delegates the question itself) and the compare, aggregate and difference questions
over several named entities (M delegates one subtask per entity, `oracle_subtask`, then answers). A
chain of hops is left out: it needs what the first page says before the next can be asked for, which RL
has to learn (docs/method.md §Training schedule). M needs max_turns of at least subtasks + 1 and the single
agent 2 × chains + 1, else the episode is not finished and not kept.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedTokenizerBase

from mgrpo_actors.agents.setup import agent_tools
from mgrpo_actors.agents.trajectory import TokenTrajectory, encode_template
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.config.node import ToolsConfig
from mgrpo_actors.engines.base import Generation, SamplingParams, WeightsSource
from mgrpo_actors.envs.qa import Evidence, Question
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import AgentModel
from mgrpo_actors.rollout.local import run_rollouts, run_single_agent_rollouts

__all__ = ["OracleDemonstrations", "OracleEngine", "oracle_demonstrations", "oracle_subtask", "single_page"]

# ChatML, the template of every model we ship
_USER, _ASSISTANT, _END = ("<|im_start|>user", "<|im_start|>assistant", "<|im_end|>")


@dataclass(frozen=True)
class OracleDemonstrations:
    """Each agent's worked episodes as token trajectories (loss mask on the agent's own tokens)."""

    main: list[TokenTrajectory]  # M's (the single agent's in single-agent mode)
    sub: list[TokenTrajectory]  # S's (empty in single-agent mode)


def single_page(question: Question) -> bool:
    """Every evidence chain of `question` reads one page (what the oracle can work)."""
    return bool(question.evidence) and all(len(chain.urls) == 1 for chain in question.evidence)


def oracle_subtask(question: Question, chain: Evidence) -> str:
    """What the oracle's M delegates for one evidence chain: a one-chain question as it is; with several, the
    fact about the chain's entity, the question saying which fact."""
    if len(question.evidence) == 1:
        return question.question
    return f"Find the fact about {chain.subject} that this question needs: {question.question}"


class OracleEngine:
    """A RolloutEngine for one role ("main", "sub" or "single") that writes the oracle's turns for
    `questions`; the question a prompt is about is its last user message (S's: "Task: <question>")."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, role: str, questions: Sequence[Question]) -> None:
        if role not in ("main", "sub", "single"):
            raise ValueError(f"oracle role must be main, sub or single, got {role!r}")
        self.tokenizer, self.role, self.policy_version = tokenizer, role, 0
        workable = [q for q in questions if single_page(q)]
        self.questions = {q.question: q for q in workable}
        self.subtasks = {oracle_subtask(q, chain): (q, chain) for q in workable for chain in q.evidence}

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        return [self._generation(self.tokenizer.decode(list(prompt)), params) for prompt in prompts]

    def load_weights(self, weights: WeightsSource, version: int) -> None:
        raise ValueError("the oracle engine has no weights to load")

    def _generation(self, prompt: str, params: SamplingParams) -> Generation:
        ids = encode_template(self.tokenizer, self._turn(prompt))
        if not ids or ids[-1] not in params.stop_token_ids:
            ids = [*ids, self.tokenizer.eos_token_id]  # the turn ends on the end-of-turn token, as a model's would
        finish = "stop"
        if len(ids) > params.max_new_tokens:  # what the turn's budget leaves of it, as an engine would
            ids, finish = ids[: params.max_new_tokens], "length"
        return Generation(
            token_ids=ids, logprobs=np.zeros(len(ids), np.float32), finish_reason=finish, policy_version=0
        )

    def _turn(self, prompt: str) -> str:
        if _USER not in prompt:
            raise ValueError("oracle demonstrations need a ChatML chat template (<|im_start|>user …)")
        episode = prompt[prompt.rindex(_USER) :]  # the demonstration exchange comes before the last user message
        turn = episode.count(_ASSISTANT) - 1
        user = episode[len(_USER) :].split(_END, 1)[0].strip()  # the question, or S's "Task: <subtask>"
        found: tuple[Question, Evidence | None] | None
        if self.role == "sub":
            found = self.subtasks.get(user.removeprefix("Task: ").split("\n\nContext: ", 1)[0])
        else:  # M and the single agent work a whole question
            asked = self.questions.get(user)
            found = None if asked is None else (asked, None)
        if found is None:
            raise ValueError(
                "the oracle knows only the questions it was given whose evidence chains each read one page "
                "(lookups, compare, aggregate, difference)"
            )
        question, chain = found
        if self.role == "main":
            if turn < len(question.evidence):
                task = oracle_subtask(question, question.evidence[turn])
                return format_tool_call("delegate", {"task": task, "context": ""})
            return format_answer(question.answer)
        chains = question.evidence if chain is None else (chain,)
        steps = [
            step
            for one in chains
            for step in (
                format_tool_call("search", {"query": one.subject}),
                format_tool_call("visit", {"url": one.urls[-1], "goal": question.question}),
            )
        ]
        if turn < len(steps):
            return steps[turn]
        if chain is None:  # the single agent
            return format_answer(question.answer)
        return format_answer(json.dumps({"findings": f"{chain.subject}: {chain.fact}.", "evidence": [chain.urls[-1]]}))


def oracle_demonstrations(
    questions: Sequence[Question],
    main_tokenizer: PreTrainedTokenizerBase,
    sub_tokenizer: PreTrainedTokenizerBase | None,
    tools_cfg: ToolsConfig,
    cfg: RolloutConfig,
) -> OracleDemonstrations:
    """One oracle rollout per question that `single_page` allows (the others are skipped) on the real tools of
    `tools_cfg`; `sub_tokenizer` None: the single agent's episodes instead of M's and S's."""
    workable = [q for q in questions if single_page(q)]
    main_out: list[TokenTrajectory] = []
    sub_out: list[TokenTrajectory] = []
    main_role = "single" if sub_tokenizer is None else "main"
    main = AgentModel(OracleEngine(main_tokenizer, main_role, workable), main_tokenizer)
    tools = agent_tools(tools_cfg, main, cfg.main.max_new_tokens_per_turn)  # the oracle never calls `reason`
    if sub_tokenizer is None:
        single = main
        for q in workable:
            rollout = run_single_agent_rollouts(q, 1, single, tools, cfg).rollouts[0]
            if rollout.main_score.r_correct > 0 and rollout.main_score.format.ok:
                main_out.append(rollout.main.trajectory)
        return OracleDemonstrations(main_out, [])
    sub = AgentModel(OracleEngine(sub_tokenizer, "sub", workable), sub_tokenizer)
    for q in workable:
        rollout = run_rollouts(q, 1, main, sub, tools, cfg).rollouts[0]
        if rollout.main_score.r_correct > 0 and rollout.main_score.format.ok:
            main_out.append(rollout.main.trajectory)
        sub_out += [
            call.episode.trajectory
            for call, score in zip(rollout.sub_calls, rollout.sub_scores, strict=True)
            if score.format.ok
        ]
    return OracleDemonstrations(main_out, sub_out)
