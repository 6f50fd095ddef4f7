"""What the agent tests share: the tiny tokenizer, a small synthetic web and its tools (built once)."""

from __future__ import annotations

import functools
import json

import numpy as np
import torch

from mgrpo_actors.agents.episode import EpisodeRecord
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.engines import Generation, SamplingParams, token_log_probs
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.envs.synthetic_web import SyntheticWeb, SyntheticWebConfig, build_synthetic_web
from mgrpo_actors.envs.world import WorldConfig
from mgrpo_actors.models.loader import load_tokenizer, resolve_model_dir
from mgrpo_actors.tools.reason import ReasonTool
from mgrpo_actors.tools.registry import ToolRegistry
from mgrpo_actors.tools.search import SearchTool
from mgrpo_actors.tools.visit import VisitTool
from tests.scripted_engine import ScriptedEngine, by_turn

__all__ = [
    "RecordingEngine",
    "assert_token_in_token_out",
    "lookup_question",
    "main_script",
    "recomputed_logprobs",
    "small_web",
    "sub_script",
    "tiny_tokenizer",
    "web_tools",
]


@functools.cache
def tiny_tokenizer(preset: str = "main"):
    return load_tokenizer(resolve_model_dir(f"tiny:{preset}"))


@functools.cache
def small_web(seed: int = 0) -> SyntheticWeb:
    return build_synthetic_web(SyntheticWebConfig(world=WorldConfig(seed=seed, num_entities=120)))


def web_tools(web: SyntheticWeb, reason_reply: str = "Result: 42") -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(SearchTool(web.pages))
    registry.register(VisitTool(web.pages, max_chars=600))
    registry.register(ReasonTool(generate=lambda prompt: reason_reply))
    return registry


def lookup_question() -> Question:
    """A single-fact question of the small web."""
    return next(q for q in small_web().splits["train"] if q.kind == "lookup" and len(q.evidence) == 1)


def sub_script(question: Question) -> ScriptedEngine:
    """S done right: search the subject, visit its page, answer the fact as JSON."""
    (chain,) = question.evidence
    findings = json.dumps({"findings": f"{chain.subject}: {chain.fact}.", "evidence": list(chain.urls)})
    return ScriptedEngine(
        tiny_tokenizer(),
        by_turn(
            format_tool_call("search", {"query": chain.subject}),
            format_tool_call("visit", {"url": chain.urls[0], "goal": "the fact"}),
            format_answer(findings),
        ),
    )


def main_script(question: Question, answer: str, delegations: int = 1) -> ScriptedEngine:
    """M delegates the question `delegations` times, then answers `answer`."""
    delegate = format_tool_call("delegate", {"task": question.question, "context": ""})
    return ScriptedEngine(tiny_tokenizer(), by_turn(*[delegate] * delegations, format_answer(answer)))


class RecordingEngine:
    """Passes calls to a real engine and keeps every (prompt, generation) it returned."""

    def __init__(self, engine):
        self.engine = engine
        self.sampled: dict[tuple[int, ...], list[Generation]] = {}  # K episodes share their first prompt

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        generations = self.engine.generate(prompts, params)
        for prompt, generation in zip(prompts, generations, strict=True):
            self.sampled.setdefault(tuple(prompt), []).append(generation)
        return generations

    def load_weights(self, weights, version: int) -> None:
        self.engine.load_weights(weights, version)


def assert_token_in_token_out(record: EpisodeRecord, engine: RecordingEngine) -> None:
    """Each turn was generated from exactly the trajectory before it, its sampled ids are the trajectory's
    ids with the engine's logprobs, and the loss mask is 1 on exactly those ids."""
    trajectory = record.trajectory
    ids, mask = trajectory.token_ids.tolist(), trajectory.loss_mask
    expected_mask = np.zeros(len(ids), dtype=np.uint8)
    for start, end in trajectory.turn_spans:
        candidates = [g for g in engine.sampled[tuple(ids[:start])] if g.token_ids == ids[start:end]]
        assert candidates, f"turn at {start}:{end} is not what the engine sampled from the context before it"
        np.testing.assert_array_equal(trajectory.behaviour_logprobs[start:end], candidates[0].logprobs)
        expected_mask[start:end] = 1
    np.testing.assert_array_equal(mask, expected_mask)
    assert np.all(trajectory.behaviour_logprobs[mask == 0] == 0)
    assert trajectory.policy_version == engine.policy_version


def recomputed_logprobs(model, token_ids: np.ndarray, params: SamplingParams) -> np.ndarray:
    """logprob of token t given tokens < t under the sampling distribution, from one forward pass; [T-1]."""
    ids = torch.tensor(token_ids[None].astype(np.int64))
    with torch.no_grad():
        logits = model(ids).logits[0]
    return token_log_probs(logits[:-1], ids[0, 1:], params).numpy()
