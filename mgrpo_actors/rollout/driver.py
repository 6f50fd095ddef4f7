"""`run_episodes`: a batch of agent episodes on one engine, turn by turn, until every one is done.

Each step makes one batched `engine.generate` over the prompts of all running episodes (one call per
distinct sampling setting, in practice one), then carries out what the turns asked for:
- tool calls go, all at once, to a `ToolExecutor` (locally a ToolRegistry; in the pipeline, tool actors
  over NATS);
- calls of M's delegate tools (`delegate`, or one per sub-agent type: agents/delegation.py `Delegates`) go, all at
  once, to a `Delegate` callback, each request naming its type (locally sub-agent episodes batched on each
  type's engine, rollout/local_subagents.py; in the pipeline, sub-agent actors over NATS);
- malformed turns and calls of tools the agent does not have get an error message back.
Every answer returns to its episode as a tool message (loss mask 0).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedTokenizerBase

from mgrpo_actors.agents.delegation import (
    ONE_TYPE,
    Delegate,
    Delegates,
    DelegationRequest,
    delegation_request,
    format_subtask_result,
)
from mgrpo_actors.agents.episode import Action, AgentEpisode, Malformed, ToolCall
from mgrpo_actors.agents.turn_format import format_tool_result
from mgrpo_actors.engines.base import RolloutEngine, SamplingParams
from mgrpo_actors.log import get_logger
from mgrpo_actors.tools.base import ToolOutput
from mgrpo_actors.tools.registry import ToolRegistry

__all__ = ["AgentModel", "DriverStats", "ToolExecutor", "registry_executor", "run_episodes", "step_seed"]

log = get_logger("mgrpo.agents.driver")

ToolExecutor = Callable[[Sequence[ToolCall]], list[ToolOutput]]


@dataclass(frozen=True)
class AgentModel:
    """An agent's policy as the loop needs it: the engine that samples and the tokenizer of its ids."""

    engine: RolloutEngine
    tokenizer: PreTrainedTokenizerBase


@dataclass
class DriverStats:
    """Where a batch of episodes spent its time."""

    steps: int = 0  # batched generation steps (turn by turn: one per turn batch; continuously: one per decode step)
    turns: int = 0  # generations over all episodes
    generated_tokens: int = 0  # tokens sampled over all episodes (tails cut after an action included)
    generate_s: float = 0.0  # seconds in engine.generate
    tools_s: float = 0.0  # seconds in the tool executor
    delegate_s: float = 0.0  # seconds in the delegate callback (the sub-agents' whole episodes)

    def add(self, other: DriverStats) -> None:
        for name in ("steps", "turns", "generated_tokens", "generate_s", "tools_s", "delegate_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def registry_executor(registry: ToolRegistry) -> ToolExecutor:
    """The local ToolExecutor: each call through `registry.call`, which never raises."""

    def execute(calls: Sequence[ToolCall]) -> list[ToolOutput]:
        return [registry.call(call.name, call.arguments) for call in calls]

    return execute


def step_seed(seed: int | None, *path: int) -> int | None:
    """A sampling seed for one generate call, derived from the run's seed and where the call is."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, *path]).generate_state(1)[0])


def _generate(
    episodes: Sequence[AgentEpisode], engine: RolloutEngine, seed: int | None, stats: DriverStats
) -> list[Action]:
    """One turn of every episode: one generate call per distinct sampling setting."""
    groups: dict[SamplingParams, list[int]] = {}
    for index, episode in enumerate(episodes):
        groups.setdefault(episode.sampling_params(seed=None), []).append(index)
    actions: list[Action | None] = [None] * len(episodes)
    for group_index, (params, members) in enumerate(groups.items()):
        params = dataclasses.replace(params, seed=step_seed(seed, group_index))
        started = time.perf_counter()
        generations = engine.generate([episodes[i].next_prompt_ids() for i in members], params)
        stats.generate_s += time.perf_counter() - started
        for i, generation in zip(members, generations, strict=True):
            actions[i] = episodes[i].apply(generation)
            stats.generated_tokens += len(generation.token_ids)
    stats.turns += len(episodes)
    return [action for action in actions if action is not None]


def _unknown_tool(name: str, episode: AgentEpisode) -> str:
    return f"Error: unknown tool {name[:100]!r}; known tools: {', '.join(episode.tool_names) or 'none'}"


def _run_tools(calls: list[tuple[AgentEpisode, ToolCall]], execute: ToolExecutor, stats: DriverStats) -> None:
    if not calls:
        return
    started = time.perf_counter()
    results = execute([call for _, call in calls])
    stats.tools_s += time.perf_counter() - started
    if len(results) != len(calls):
        raise RuntimeError(f"the tool executor answered {len(results)} of {len(calls)} calls")
    for (episode, _), result in zip(calls, results, strict=True):
        episode.add_tool_result(format_tool_result(result), ok=result.ok)


def _run_delegations(
    requests: list[tuple[AgentEpisode, DelegationRequest]], delegate: Delegate | None, stats: DriverStats
) -> None:
    if not requests:
        return
    if delegate is None:
        raise ValueError("episodes may delegate but no delegate callback was given")
    started = time.perf_counter()
    results = delegate([request for _, request in requests])
    stats.delegate_s += time.perf_counter() - started
    if len(results) != len(requests):
        raise RuntimeError(f"the delegate answered {len(results)} of {len(requests)} delegations")
    for (episode, request), result in zip(requests, results, strict=True):
        if result.call_id != request.call_id:
            raise RuntimeError(f"delegation {request.call_id} was answered by a result for {result.call_id}")
        episode.add_tool_result(format_subtask_result(result), ok=result.ok)


def _route(
    episode: AgentEpisode,
    action: Action,
    tool_calls: list[tuple[AgentEpisode, ToolCall]],
    delegations: list[tuple[AgentEpisode, DelegationRequest]],
    delegates: Delegates,
) -> None:
    """Queue a turn's call for the batch, or answer it at once with an error message."""
    if isinstance(action, Malformed):
        episode.add_tool_result(action.feedback, ok=False)
    elif isinstance(action, ToolCall) and action.name not in episode.tool_names:
        episode.add_tool_result(_unknown_tool(action.name, episode), ok=False)
    elif isinstance(action, ToolCall) and action.name in delegates.types:
        sub_type = delegates.types[action.name]
        request = delegation_request(action.arguments, episode.rollout_index, action.call_id, sub_type, action.name)
        if isinstance(request, str):
            episode.add_tool_result(f"Error: {request}", ok=False)
        else:
            delegations.append((episode, request))
    elif isinstance(action, ToolCall):
        tool_calls.append((episode, action))


def run_episodes(
    episodes: Sequence[AgentEpisode],
    engine: RolloutEngine,
    execute_tools: ToolExecutor,
    delegate: Delegate | None = None,
    seed: int | None = None,
    delegates: Delegates = ONE_TYPE,
) -> DriverStats:
    """Run every episode to its end; seed (None: the engine's own RNG stream) makes sampling reproducible. Calls
    of `delegates`' tools go to `delegate`, each request naming its sub-agent type. On an engine with
    `continuous_batching` on, episodes go on continuously (`_run_continuously`), else turn by turn."""
    if getattr(engine, "continuous_batching", False) and episodes:
        return _run_continuously(episodes, engine, execute_tools, delegate, seed, delegates)
    stats = DriverStats()
    while running := [episode for episode in episodes if not episode.done]:
        actions = _generate(running, engine, step_seed(seed, stats.steps), stats)
        stats.steps += 1
        tool_calls: list[tuple[AgentEpisode, ToolCall]] = []
        delegations: list[tuple[AgentEpisode, DelegationRequest]] = []
        for episode, action in zip(running, actions, strict=True):
            if not episode.done:  # an Answer, or the final turn, ends the episode: nothing to carry out
                _route(episode, action, tool_calls, delegations, delegates)
        _run_tools(tool_calls, execute_tools, stats)
        _run_delegations(delegations, delegate, stats)
    log.debug("episodes_done", episodes=len(episodes), steps=stats.steps, tokens=stats.generated_tokens)
    return stats


def _run_continuously(
    episodes: Sequence[AgentEpisode],
    engine: RolloutEngine,
    execute_tools: ToolExecutor,
    delegate: Delegate | None,
    seed: int | None,
    delegates: Delegates,
) -> DriverStats:
    """run_episodes on the engine's continuous batch (engines/continuous.py): an episode whose turn ends runs its
    tool call at once and its next turn joins the batch while other turns still decode. Delegations wait until
    nothing decodes, then go all at once (the sub-agents batch their episodes as turn by turn). Turn t of episode i
    samples with seed step_seed(seed, i, t), whenever it runs."""
    batch = engine.continuous_batch()  # type: ignore[attr-defined]
    stats = DriverStats()
    turns = [0] * len(episodes)
    tickets: dict[int, int] = {}  # ticket -> episode index

    def submit(index: int) -> None:
        episode = episodes[index]
        params = dataclasses.replace(episode.sampling_params(seed=None), seed=step_seed(seed, index, turns[index]))
        tickets[batch.submit(episode.next_prompt_ids(), params)] = index
        turns[index] += 1

    for index, episode in enumerate(episodes):
        if not episode.done:
            submit(index)
    delegating: list[int] = []
    delegations: list[tuple[AgentEpisode, DelegationRequest]] = []
    while batch.busy:  # delegations go at the end of the step that leaves nothing decoding, which submits again
        started = time.perf_counter()
        finished = batch.step()
        stats.generate_s += time.perf_counter() - started
        stats.steps += 1
        tool_calls: list[tuple[AgentEpisode, ToolCall]] = []
        ready: list[int] = []
        for ticket, generation in finished:
            index = tickets.pop(ticket)
            episode = episodes[index]
            action = episode.apply(generation)
            stats.turns += 1
            stats.generated_tokens += len(generation.token_ids)
            if episode.done:
                continue
            asked = len(delegations)
            _route(episode, action, tool_calls, delegations, delegates)
            (delegating if len(delegations) > asked else ready).append(index)
        _run_tools(tool_calls, execute_tools, stats)
        for index in ready:
            submit(index)
        if delegations and not batch.busy:
            _run_delegations(delegations, delegate, stats)
            for index in delegating:
                submit(index)
            delegating, delegations = [], []
    log.debug("episodes_done", episodes=len(episodes), steps=stats.steps, tokens=stats.generated_tokens)
    return stats
