"""run_episodes on an engine with continuous batching (rollout/driver.py `_run_continuously`): an episode whose turn
ends runs its tool call at once and its next turn joins while other turns still decode; delegations wait until
nothing decodes and go together; turn t of episode i samples with seed step_seed(seed, i, t). With the real tiny
model, every turn is token in, token out with behaviour logprobs a forward pass recomputes, and a seed reproduces
the episodes."""

import numpy as np
import pytest

from mgrpo_actors.agents.delegation import DelegationRequest
from mgrpo_actors.agents.main import main_episode
from mgrpo_actors.agents.single import single_episode
from mgrpo_actors.agents.sub import sub_episode
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.engines.base import EngineConfig
from mgrpo_actors.engines.compute_thread import ComputeThreadEngine
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.rollout.driver import registry_executor, run_episodes, step_seed
from protocols.messages import SubtaskResult
from tests.agent_helpers import recomputed_logprobs, small_web, tiny_tokenizer, web_tools
from tests.scripted_engine import ScriptedBatch, ScriptedEngine, by_turn

CFG = AgentConfig(max_turns=4, max_new_tokens_per_turn=128)
LONG = format_answer(" ".join(["a much longer answer that takes the engine many more steps to write out"] * 6))


def _scripted(respond) -> ScriptedEngine:
    return ScriptedEngine(tiny_tokenizer(), respond, continuous_batching=True)


def test_a_short_turns_tool_call_runs_and_its_next_turn_joins_while_a_long_turn_decodes():
    tools = web_tools(small_web())
    page = small_web().pages[0]
    visit = format_tool_call("visit", {"url": page.url, "goal": "read it"})
    short = by_turn(visit, format_answer("done"))
    engine = _scripted(lambda prompt: LONG if "slow?" in prompt else short(prompt))
    cfg = AgentConfig(max_turns=4, max_new_tokens_per_turn=400)
    episodes = [single_episode(q, tiny_tokenizer(), tools, cfg, i) for i, q in enumerate(["fast?", "slow?"])]
    tool_calls_at = []

    def executor(calls):
        tool_calls_at.append(len(engine.batches[0].events))
        return registry_executor(tools)(calls)

    stats = run_episodes(episodes, engine, executor, seed=3)
    events = engine.batches[0].events
    # fast's first turn ends, its visit runs, its second turn (ticket 2) is submitted and ends before slow's turn
    assert events.index(("submit", 2)) < events.index(("done", 1))
    assert events.index(("done", 2)) < events.index(("done", 1))
    assert len(tool_calls_at) == 1 and tool_calls_at[0] < events.index(("done", 1))
    assert episodes[0].record().turns[0].tool_result.startswith(f"Title: {page.title}")
    assert [len(e.record().turns) for e in episodes] == [2, 1] and stats.turns == 3
    assert stats.steps == max(
        len(g.token_ids) for g in [engine._generation(p, s) for p, s in engine.batches[0].submits]
    )


def test_delegations_wait_until_nothing_decodes_and_go_together():
    delegate_at, batches = [], []
    tasks = {"quick?": "Find A.", "slow?": "Find who founded Aldora, the old city by the river, and when."}

    def respond(prompt):
        question = "slow?" if "slow?" in prompt else "quick?"
        call = format_tool_call("delegate", {"task": tasks[question], "context": ""})
        return by_turn(call, format_answer("Galen"))(prompt)

    engine = _scripted(respond)

    def delegate(requests):
        delegate_at.append(engine.batches[0].running)
        batches.append([r.task for r in requests])
        return [SubtaskResult(call_id=r.call_id, ok=True, findings="Galen.") for r in requests]

    tools = web_tools(small_web())
    episodes = [main_episode(q, tiny_tokenizer(), tools, CFG, i) for i, q in enumerate(tasks)]
    run_episodes(episodes, engine, registry_executor(tools), delegate=delegate, seed=0)
    assert batches == [list(tasks.values())] and delegate_at == [0]
    assert all(e.record().turns[0].tool_ok for e in episodes)


def test_with_delegations_steps_count_the_decode_steps(monkeypatch):
    engine = _scripted(by_turn(format_tool_call("delegate", {"task": "Find A.", "context": ""}), format_answer("A")))
    calls = []
    step = ScriptedBatch.step
    monkeypatch.setattr(ScriptedBatch, "step", lambda self: calls.append(1) or step(self))

    def delegate(requests):
        return [SubtaskResult(call_id=r.call_id, ok=True, findings="A.") for r in requests]

    tools = web_tools(small_web())
    episodes = [main_episode(q, tiny_tokenizer(), tools, CFG, i) for i, q in enumerate(["a?", "b?"])]
    stats = run_episodes(episodes, engine, registry_executor(tools), delegate=delegate, seed=0)
    assert stats.turns == 4 and stats.delegate_s > 0
    assert stats.steps == len(calls)


def test_an_engine_on_the_compute_thread_runs_continuously_too():
    """ComputeThreadEngine (the agents' engine in a node) hands continuous_batching and the rest of the engine's
    attributes through, and its batch's submits and steps go to the compute thread."""
    scripted = _scripted(by_turn(format_tool_call("reason", {"problem": "6 * 7?"}), format_answer("42")))
    engine = ComputeThreadEngine(scripted, threads=1)
    assert engine.continuous_batching and engine.policy_version == 0
    tools = web_tools(small_web(), reason_reply="Result: 42")
    episodes = [main_episode("q?", tiny_tokenizer(), tools, CFG, i) for i in range(2)]
    stats = run_episodes(episodes, engine, registry_executor(tools), seed=7)
    assert len(scripted.batches) == 1 and not scripted.calls and stats.turns == 4


def test_turn_t_of_episode_i_samples_with_its_own_seed():
    engine = _scripted(by_turn(format_tool_call("reason", {"problem": "6 * 7?"}), format_answer("42")))
    tools = web_tools(small_web(), reason_reply="Result: 42")
    episodes = [main_episode("q?", tiny_tokenizer(), tools, CFG, i) for i in range(3)]
    run_episodes(episodes, engine, registry_executor(tools), seed=7)
    seeds = [params.seed for _, params in engine.batches[0].submits]
    assert sorted(seeds) == sorted(step_seed(7, i, t) for i in range(3) for t in range(2))


@pytest.fixture(scope="module")
def tiny_sub(one_torch_thread):
    return load_model("tiny:sub")


def _sub_episodes(tokenizer, tools, cfg, n=6):
    requests = [
        DelegationRequest(task=f"Who founded Aldora? ({i})", context="", rollout_index=i, call_id=f"r{i}.t0")
        for i in range(n)
    ]
    return [sub_episode(r, tokenizer, tools, cfg) for r in requests]


def test_tiny_model_episodes_run_continuously_token_in_token_out_and_a_seed_reproduces_them(tiny_sub):
    model, tokenizer = tiny_sub
    cfg = AgentConfig(max_turns=3, max_new_tokens_per_turn=24, max_context_tokens=2048, temperature=0.8, top_k=40)
    tools = web_tools(small_web())
    runs = []
    for _ in range(2):
        engine = HFEngine(model, tokenizer, EngineConfig(continuous_batching=True))
        episodes = _sub_episodes(tokenizer, tools, cfg)
        stats = run_episodes(episodes, engine, registry_executor(tools), seed=11)
        runs.append([e.record() for e in episodes])
    assert stats.turns > len(episodes)  # malformed turns got feedback and went on: later turns joined
    for first, again in zip(*runs, strict=True):
        np.testing.assert_array_equal(first.trajectory.token_ids, again.trajectory.token_ids)
    params = cfg.sampling_params(max_new_tokens=1, seed=None)
    for record in runs[0]:
        trajectory = record.trajectory
        positions = np.flatnonzero(trajectory.loss_mask)
        recomputed = recomputed_logprobs(model, trajectory.token_ids, params)
        np.testing.assert_allclose(
            trajectory.behaviour_logprobs[positions], recomputed[positions - 1], atol=1e-4, rtol=0
        )


def test_the_agent_setting_reaches_the_engine_and_needs_the_hf_engine():
    from mgrpo_actors.agents.setup import engine_config

    assert engine_config(AgentConfig(continuous_batching=True)).continuous_batching
    assert not engine_config(AgentConfig()).continuous_batching
    with pytest.raises(ValueError, match="continuous_batching needs engine hf"):
        AgentConfig(engine="hf-generate", continuous_batching=True)
