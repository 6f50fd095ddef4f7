"""The `agents` section of the node config: one AgentConfig per agent (M's and S's models, engines,
budgets and sampling; each agent is its own LLM), and the judges that score them (docs/method.md
§The system being trained, §Rewards)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from mgrpo_actors.algo.config import JudgeConfig
from mgrpo_actors.config.dtypes import resolve_dtype
from mgrpo_actors.config.loader import ENTRIES_START_FROM
from mgrpo_actors.engines.base import SamplingParams
from mgrpo_actors.engines.vllm_limits import vllm_temperature_error
from protocols.subjects import validate_sub_type

__all__ = ["SINGLE_AGENT_TOOLS", "AgentConfig", "AgentsConfig", "VLLMConfig", "cpu_agent"]


# The tools a single agent may be given (docs/method.md §Training schedule: the single-agent baseline has all of them).
SINGLE_AGENT_TOOLS = ("search", "visit", "reason")


@dataclass(frozen=True)
class VLLMConfig:
    """Settings of an agent's vllm engine (unused by the other engines); docs/deployment.md §GPU hosts."""

    gpu_memory_utilization: float = 0.3
    """share of the whole GPU vLLM takes for weights and KV cache; it must be free when the engine starts (a learner
    or another agent on the same GPU holds the rest)"""
    max_model_len: int | None = None
    """longest prompt + generation vLLM plans KV cache for; None = the model's maximum"""
    enforce_eager: bool = False
    """skip CUDA-graph capture: a faster start, slower decoding"""

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"vllm.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"vllm.max_model_len must be >= 1 or null, got {self.max_model_len!r}")


@dataclass(frozen=True)
class AgentConfig:
    """Model, budgets and sampling of one agent (main, sub or single); each role has its own instance."""

    model: str = "smollm2"
    """model spec: tiny:main, tiny:sub, smollm2, or a local HF model directory"""
    engine: str = "hf"
    """rollout engine: hf (our decoding loop on a key/value cache kept across turns, for Llama- and Qwen-style
    models; others fall back to generate), hf-generate (transformers' generate), vllm (GPU hosts, optional extra)
    or "package.module:factory" (a factory of your own)"""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """dtype the rollout model is loaded in; auto: bfloat16 where this host's device computes it natively (AMX or
    AVX512-BF16 CPUs, bf16 GPUs), else float32 (config/dtypes.py)"""
    device: str = "cpu"
    """where the rollout model runs ("cpu", "cuda", "cuda:1")"""
    max_turns: int = 20
    """generations per episode, the forced final-answer turn included (docs/method.md: ~20)"""
    max_new_tokens_per_turn: int = 512
    """generation budget of one turn"""
    max_context_tokens: int = 8192
    """context budget: prompt + every turn + every tool output"""
    temperature: float = 1.0
    """sampling temperature (reference code: 1.0)"""
    top_p: float = 1.0
    """nucleus sampling mass; 1.0 = off"""
    top_k: int = 0
    """keep only the k most likely tokens; 0 = off"""
    system_prompt: str | None = None
    """replaces the role's default system prompt (prompts.py); None = default"""
    stop_after_action: bool = True
    """End each turn right after its first complete, valid action block, as a stop string would: the engine
    stops on closing tags that are single ids, and the hf engine's own decoding loop at the id that completes the
    block whatever the tokenizer (agents/episode.py ActionStop); otherwise what was sampled after the block is
    dropped (the ids and logprobs kept are unchanged: a prefix does not depend on its tail)."""
    demonstration: bool = True
    """open with the role's worked example exchange (prompts.py); small models need it"""
    tools: list[str] | None = None
    """The single agent's tools (agents.main under run.method single-agent), any of SINGLE_AGENT_TOOLS (search, visit,
    reason); None = all of them; [] = none: plain GRPO, the question alone answered in an answer block (no
    demonstration; with max_turns 1 in deploy/configs/grpo.yaml). M keeps its own (reason and delegate). A sub-agent
    type of agents.subs: the tools it calls, any the tool nodes serve (tools.serve); None = search and visit.
    agents.sub.tools stays None (S's tools are search and visit)."""
    description: str | None = None
    """a sub-agent type of agents.subs: what its delegate tool tells M it does (M sees one delegate tool per type);
    None = the default sub-agent's ("can search and read web pages")"""
    expert_judge: Literal["contains-reference", "llm", "none"] | None = None
    """a sub-agent type of agents.subs: the r_expert judge of its findings (none, for one whose findings no page holds,
    e.g. a calculator: β3 is folded into β2 for it); None = agents.expert_judge"""
    continuous_batching: bool = False
    """engine hf: each episode's next turn joins the running batch as soon as its tool call is answered, instead of
    every turn of a batch waiting for the slowest (engines/continuous.py; measured by `mgrpo bench continuous`);
    sampling seeds then follow (episode, turn), so the episodes differ from turn-by-turn ones with the same seed"""
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    """the vllm engine's GPU memory share, context length and CUDA graphs (engine vllm only)"""

    def __post_init__(self) -> None:
        # auto is resolved here, on the host that loads the config: each picks for its own device
        object.__setattr__(self, "dtype", resolve_dtype(self.dtype, self.device))
        if self.engine not in ("hf", "hf-generate", "vllm") and ":" not in self.engine:
            raise ValueError(
                f"agent engine must be hf, hf-generate, vllm or 'package.module:factory', got {self.engine!r}"
            )
        if self.max_turns < 1:
            raise ValueError(f"agent max_turns must be >= 1, got {self.max_turns!r}")
        if self.max_new_tokens_per_turn < 1:
            raise ValueError(f"agent max_new_tokens_per_turn must be >= 1, got {self.max_new_tokens_per_turn!r}")
        if self.max_context_tokens <= self.max_new_tokens_per_turn:
            raise ValueError(
                f"agent max_context_tokens ({self.max_context_tokens}) must exceed max_new_tokens_per_turn "
                f"({self.max_new_tokens_per_turn}): the prompt needs room too"
            )
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"agent temperature must be a finite number >= 0, got {self.temperature!r}")
        SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)  # same checks as the engine
        problem = vllm_temperature_error(self.temperature) if self.engine == "vllm" else None
        if problem:
            raise ValueError(f"agent {problem}")
        if self.continuous_batching and self.engine != "hf":
            raise ValueError(f"agent continuous_batching needs engine hf (our decoding loop), got {self.engine!r}")
        if self.description is not None and not self.description.strip():
            raise ValueError("agent description must not be blank: give what the sub-agent does, or leave it null")

    def sampling_params(
        self, max_new_tokens: int, seed: int | None, stop_token_ids: tuple[int, ...] = ()
    ) -> SamplingParams:
        """The engine's sampling parameters for one turn of this agent."""
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=max_new_tokens,
            stop_token_ids=stop_token_ids,
            seed=seed,
        )


def cpu_agent() -> AgentConfig:
    """Budgets sized for CPU runs of small models ([ours]); the paper's are max_turns 20, 512 tokens per
    turn, temperature 1.0 (AgentConfig's own defaults). Untrained SmolLM2 needs temperature 0.5 and its
    worked example to produce tool calls at all."""
    return AgentConfig(max_turns=3, max_new_tokens_per_turn=64, max_context_tokens=4096, temperature=0.5)


@dataclass(frozen=True)
class AgentsConfig:
    """Both agents of the vertical system; each is a different LLM with its own engine."""

    main: AgentConfig = field(default_factory=cpu_agent)
    """the main agent M (planner); defaults sized for CPU runs of small models ([ours], cpu_agent; paper: 20 turns,
    512 tokens per turn, temperature 1.0)"""
    sub: AgentConfig = field(default_factory=cpu_agent)
    """the sub-agent S (tool-using executor); the same CPU defaults as main. With agents.subs, what every sub-agent
    type starts from"""
    subs: dict[str, AgentConfig] = field(default_factory=dict, metadata={ENTRIES_START_FROM: "sub"})
    """several sub-agent types (1 + n; docs/method.md §The system being trained), by name (a-z 0-9 _): each is its own
    LLM and side, with its own learner (learners.subs) and a delegate tool of its own for M; each type's keys replace
    agents.sub's, which it starts from; {} = one type, agents.sub"""
    correct_judge: Literal["exact-match", "numeric-match", "token-f1", "llm"] = "exact-match"
    """r_correct of M's answer against the gold answers; numeric-match compares numbers ("4.0" = "4", "-4" ≠ "4"),
    llm asks llm_judge"""
    expert_judge: Literal["contains-reference", "llm", "none"] = "contains-reference"
    """r_expert of S's findings; none folds β3 into β2"""
    llm_judge: JudgeConfig | None = None
    """the OpenAI-compatible endpoint used where a judge is "llm" (correct_judge or expert_judge); None = none"""
    torch_threads: int = 1
    """torch CPU threads of the agents' engines (more is often slower on shared cores); a learner's are
    learners.<side>.torch_threads"""

    def __post_init__(self) -> None:
        for key, agent in (("main", self.main), ("sub", self.sub)):
            if agent.expert_judge is not None:
                raise ValueError(
                    f"agents.{key}.expert_judge must stay null: agents.expert_judge judges S; a sub-agent type of "
                    "agents.subs may choose its own"
                )
        typed = [agent.expert_judge for agent in self.subs.values()]
        if "llm" in (self.correct_judge, self.expert_judge, *typed) and self.llm_judge is None:
            raise ValueError("agents.llm_judge (base_url, model) is required when a judge is 'llm'")
        unknown = [name for name in self.main.tools or () if name not in SINGLE_AGENT_TOOLS]
        if unknown:
            raise ValueError(
                f"agents.main.tools names unknown tool(s) {unknown}: "
                f"the single agent's tools are {', '.join(SINGLE_AGENT_TOOLS)} ([] = none, plain GRPO)"
            )
        if self.sub.tools is not None or self.sub.description is not None:
            key = "tools" if self.sub.tools is not None else "description"
            raise ValueError(
                f"agents.sub.{key} must stay null: S's tools are search and visit, and M's one delegate tool "
                "describes it; give sub-agent types of your own their tools and description under agents.subs.<type>"
            )
        for name in self.subs:
            validate_sub_type(name)
        if self.main.description is not None:
            raise ValueError("agents.main.description must stay null: only a sub-agent type is described to M")
        if self.torch_threads < 1:
            raise ValueError(f"agents.torch_threads must be >= 1, got {self.torch_threads}")
