"""Agents, engines, judges and questions built from the node config (one place, used by the
agent roles, the aligners and `mgrpo rollout`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from mgrpo_actors.agents.delegation import Delegates
from mgrpo_actors.agents.engine_text import engine_text_generator
from mgrpo_actors.agents.trajectory import ChatTurnWrapping, encode_opening
from mgrpo_actors.algo.config import AlgoConfig
from mgrpo_actors.algo.judge import Judge, OpenAICompatibleJudge
from mgrpo_actors.algo.scorers import ContainsReferenceJudge, ExactMatchJudge, NumericMatchJudge, TokenF1Judge
from mgrpo_actors.config.agents import AgentConfig, AgentsConfig
from mgrpo_actors.config.node import NodeConfig, ToolsConfig
from mgrpo_actors.config.pipeline import PipelineConfig
from mgrpo_actors.engines.base import EngineConfig, SamplingParams
from mgrpo_actors.engines.registry import make_engine
from mgrpo_actors.envs.dataset import SPLITS, DatasetError, load_questions
from mgrpo_actors.envs.pages import Page
from mgrpo_actors.envs.qa import Question, QuestionFormatError
from mgrpo_actors.envs.synthetic_web import SyntheticWeb, build_synthetic_web, config_from_args
from mgrpo_actors.models.loader import ModelSpecError, load_model, load_tokenizer, resolve_model_dir
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import AgentModel
from mgrpo_actors.tools.reason import ReasonTool
from mgrpo_actors.tools.registry import ToolRegistry
from mgrpo_actors.tools.setup import build_tool_registry

__all__ = [
    "TaskQuestions",
    "agent_tools",
    "check_chat_template",
    "engine_config",
    "load_agent",
    "load_task_questions",
    "main_delegates",
    "make_judges",
    "of_kinds",
    "reason_tool",
    "rollout_config",
    "synthetic_web",
]


# What every episode's template renders (agents/trajectory.py): a system and a user message, an assistant turn, a
# tool output after it, then the next assistant header.
_PROBE_OPENING = ({"role": "system", "content": "probe"}, {"role": "user", "content": "probe"})


def check_chat_template(spec: str, tokenizer: PreTrainedTokenizerBase) -> None:
    """ModelSpecError naming the model directory unless its chat template renders the conversation an agent
    writes (system, user, assistant and tool turns), so a template that cannot fails at load, not in a rollout."""
    try:
        encode_opening(tokenizer, _PROBE_OPENING)
        ChatTurnWrapping.from_template(tokenizer, _PROBE_OPENING)
    except Exception as exc:  # jinja's TemplateError (raise_exception in a template), or the wrapping's ValueError
        raise ModelSpecError(
            f"model directory {str(resolve_model_dir(spec))!r}: its chat template cannot render an agent's "
            f"conversation (a system and a user message, then assistant and tool turns): {type(exc).__name__}: {exc}"
        ) from None


def engine_config(cfg: AgentConfig) -> EngineConfig:
    """The engine settings of an agent's config."""
    return EngineConfig(
        device=cfg.device,
        dtype=cfg.dtype,
        gpu_memory_utilization=cfg.vllm.gpu_memory_utilization,
        max_model_len=cfg.vllm.max_model_len,
        enforce_eager=cfg.vllm.enforce_eager,
        continuous_batching=cfg.continuous_batching,
    )


def load_agent(cfg: AgentConfig) -> AgentModel:
    """The agent's model on its rollout engine (`cfg.model`, `cfg.engine`, `cfg.dtype`, `cfg.device`, `cfg.vllm`); a
    model whose directory or chat template cannot serve an agent is a ModelSpecError here, before any rollout. The
    vllm engine gets the model's directory (vLLM loads it itself): no transformers copy is loaded onto the device."""
    if cfg.engine == "vllm":
        model_dir = resolve_model_dir(cfg.model)
        tokenizer = load_tokenizer(model_dir)
        check_chat_template(cfg.model, tokenizer)
        return AgentModel(make_engine(cfg.engine, model_dir, tokenizer, engine_config(cfg)), tokenizer)
    model, tokenizer = load_model(cfg.model, dtype=getattr(torch, cfg.dtype), device=cfg.device)
    check_chat_template(cfg.model, tokenizer)
    return AgentModel(make_engine(cfg.engine, model, tokenizer, engine_config(cfg)), tokenizer)


def make_judges(agents: AgentsConfig, sub: AgentConfig | None = None) -> tuple[Judge, Judge | None]:
    """(M's r_correct judge, the r_expert judge of S, or of sub-agent type `sub`, or None when β3 is folded),
    docs/method.md §Rewards."""
    llm = OpenAICompatibleJudge(agents.llm_judge) if agents.llm_judge is not None else None
    rules: dict[str, Judge] = {
        "exact-match": ExactMatchJudge(),
        "numeric-match": NumericMatchJudge(),
        "token-f1": TokenF1Judge(),
    }
    correct: Judge = rules.get(agents.correct_judge) or llm  # type: ignore[assignment]
    expert_judge = (sub.expert_judge if sub is not None else None) or agents.expert_judge
    expert = {"contains-reference": ContainsReferenceJudge(), "llm": llm, "none": None}[expert_judge]
    return correct, expert


def rollout_config(agents: AgentsConfig, algo: AlgoConfig, sub: AgentConfig | None = None) -> RolloutConfig:
    """Budgets, sampling, reward weights and judges of M and a sub-agent type (`sub`; None: agents.sub, the one
    default type)."""
    sub = agents.sub if sub is None else sub
    correct, expert = make_judges(agents, sub)
    return RolloutConfig(main=agents.main, sub=sub, rewards=algo.rewards, correct=correct, expert=expert)


def main_delegates(config: NodeConfig) -> Delegates:
    """M's delegate tools for the run's sub-agent types, each described from its config (agents/delegation.py)."""
    sub_types = config.sides[1:]
    readers = tuple(t for t in sub_types if set(config.sub_tools(t)) == {"search", "visit"})
    return Delegates.of({t: config.agent(t).description for t in sub_types}, readers)


def reason_tool(reasoner: AgentModel, max_new_tokens: int) -> ReasonTool:
    """M's `reason` tool on M's own model, greedy: a tool, so its tokens are in nobody's trajectory."""
    greedy = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    return ReasonTool(generate=engine_text_generator(reasoner, greedy))


def agent_tools(
    tools: ToolsConfig, reasoner: AgentModel, max_new_tokens: int, pages: Sequence[Page] | None = None
) -> ToolRegistry:
    """Every tool either agent may call, in this process: search and visit (as the tool role serves
    them) and reason on `reasoner`. The pipeline runs search/visit in tool actors instead; this
    registry still gives the agents' prompts their tool schemas."""
    registry = build_tool_registry(tools, names=["search", "visit"], pages=list(pages) if pages is not None else None)
    registry.register(reason_tool(reasoner, max_new_tokens))
    return registry


def synthetic_web(tools: ToolsConfig) -> SyntheticWeb:
    """The built-in synthetic web of `tools.web_seed` / `tools.web_entities` / `tools.web_questions` /
    `tools.web_difference_share` (questions and pages)."""
    return build_synthetic_web(
        config_from_args(tools.web_seed, tools.web_entities, tools.web_questions, tools.web_difference_share)
    )


class TaskQuestions:
    """The questions of a run: splits of the built-in web or of a JSONL file (all in "train"), by id."""

    def __init__(self, splits: dict[str, list[Question]]) -> None:
        self.splits = splits
        self.by_id = {q.id: q for split in splits.values() for q in split}

    def training(self, pipeline: PipelineConfig, stage: int = 2) -> list[Question]:
        """The questions the controller draws from: the configured split, filtered by the stage's levels
        (`pipeline.stage1_levels` for stage 1 of a curriculum, `pipeline.levels` otherwise) and by
        `pipeline.kinds`."""
        key, levels = (
            ("pipeline.stage1_levels", pipeline.stage1_levels) if stage == 1 else ("pipeline.levels", pipeline.levels)
        )
        questions = of_kinds(self.splits.get(pipeline.split, []), pipeline.kinds)
        if levels is not None:
            questions = [q for q in questions if q.level in levels]
        if not questions:
            filters = [f"{key} {levels}"] if levels is not None else []
            filters += [f"pipeline.kinds {pipeline.kinds}"] if pipeline.kinds is not None else []
            named = f" with {' and '.join(filters)}" if filters else ""
            raise ValueError(
                f"pipeline.split {pipeline.split!r}{named} selects no questions "
                f"of pipeline.dataset {pipeline.dataset!r}"
            )
        return questions


def of_kinds(questions: list[Question], kinds: list[str] | None) -> list[Question]:
    """`questions` of the given kinds (pipeline.kinds), in order; None = all of them."""
    return questions if kinds is None else [q for q in questions if q.kind in kinds]


def load_task_questions(pipeline: PipelineConfig, tools: ToolsConfig) -> TaskQuestions:
    """The dataset `pipeline.dataset` names: "synthetic" (the built-in web) or a JSONL file of questions, read
    under `pipeline.dataset_fields` (as `mgrpo eval --file` reads one) or, without it, in the built-in format."""
    if pipeline.dataset == "synthetic":
        return TaskQuestions(dict(synthetic_web(tools).splits))
    try:
        questions = load_questions(pipeline.dataset, pipeline.dataset_fields)
    except DatasetError as exc:
        if not isinstance(exc.__cause__, QuestionFormatError):
            raise
        raise DatasetError(
            f"{exc} (pipeline.dataset is read in the built-in format, {{id, question, answer, aliases?}}: "
            "for a file with fields of its own, name them in pipeline.dataset_fields)"
        ) from exc
    return TaskQuestions({"train": questions, **{name: [] for name in SPLITS if name != "train"}})
