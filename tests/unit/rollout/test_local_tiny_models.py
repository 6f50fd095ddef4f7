"""Full main + sub rollouts with the real tiny models: every trajectory's loss mask is 1 on exactly the
tokens the engine sampled from exactly the context before them, and the behaviour logprobs match a
forward pass of the same model over the whole trajectory (within 1e-4, fp32)."""

import numpy as np
import pytest

from mgrpo_actors.agents.episode import EpisodeRecord
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.engines import make_engine
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import AgentModel
from mgrpo_actors.rollout.local import run_rollouts
from tests.agent_helpers import RecordingEngine, assert_token_in_token_out, recomputed_logprobs, small_web, web_tools
from tests.scripted_engine import ScriptedEngine, by_turn

MAIN_CFG = AgentConfig(max_turns=3, max_new_tokens_per_turn=24, max_context_tokens=2048)
SUB_CFG = AgentConfig(
    max_turns=3, max_new_tokens_per_turn=24, max_context_tokens=2048, temperature=0.8, top_k=40, top_p=0.9
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_main():
    return load_model("tiny:main")


@pytest.fixture(scope="module")
def tiny_sub():
    return load_model("tiny:sub")


def recording(model_and_tokenizer, version: int) -> tuple[RecordingEngine, AgentModel]:
    model, tokenizer = model_and_tokenizer
    engine = make_engine("hf", model, tokenizer)
    engine.load_weights(model.state_dict(), version=version)  # the same weights, as policy version `version`
    recorder = RecordingEngine(engine)
    return recorder, AgentModel(recorder, tokenizer)


def assert_logprobs_recompute(record: EpisodeRecord, model, cfg: AgentConfig) -> None:
    trajectory = record.trajectory
    params = cfg.sampling_params(max_new_tokens=1, seed=None)
    recomputed = recomputed_logprobs(model, trajectory.token_ids, params)
    positions = np.flatnonzero(trajectory.loss_mask)
    assert positions.size > 0 and positions.min() >= trajectory.prompt_len
    np.testing.assert_allclose(trajectory.behaviour_logprobs[positions], recomputed[positions - 1], atol=1e-4, rtol=0)


def test_a_full_rollout_of_the_tiny_models_is_token_in_token_out(tiny_main, tiny_sub):
    main_engine, main = recording(tiny_main, version=3)
    sub_engine, sub = recording(tiny_sub, version=5)
    question = small_web().splits["train"][0]
    cfg = RolloutConfig(main=MAIN_CFG, sub=SUB_CFG)
    group = run_rollouts(question, 4, main, sub, web_tools(small_web()), cfg, seed=0)
    assert len(group.rollouts) == 4
    for rollout in group.rollouts:
        assert_token_in_token_out(rollout.main, main_engine)
        assert_logprobs_recompute(rollout.main, tiny_main[0], MAIN_CFG)
        assert rollout.main.trajectory.policy_version == 3
        assert 1 <= len(rollout.main.turns) <= MAIN_CFG.max_turns
        for call in rollout.sub_calls:
            assert_token_in_token_out(call.episode, sub_engine)
            assert_logprobs_recompute(call.episode, tiny_sub[0], SUB_CFG)


def test_sub_trajectories_of_the_tiny_sub_model_are_token_in_token_out(tiny_sub):
    # Tiny random models rarely delegate, so M is scripted to; every S token is the real model's.
    sub_engine, sub = recording(tiny_sub, version=2)
    question = small_web().splits["train"][0]
    tokenizer = tiny_sub[1]
    delegate = format_tool_call("delegate", {"task": question.question, "context": "a lookup"})
    main = AgentModel(ScriptedEngine(tokenizer, by_turn(delegate, delegate, format_answer("x"))), tokenizer)
    cfg = RolloutConfig(main=AgentConfig(max_turns=3, max_new_tokens_per_turn=128), sub=SUB_CFG)
    group = run_rollouts(question, 2, main, sub, web_tools(small_web()), cfg, seed=1)
    calls = [call for rollout in group.rollouts for call in rollout.sub_calls]
    assert [call.request.call_id for call in calls] == ["r0.t0", "r0.t1", "r1.t0", "r1.t1"]
    for call in calls:
        assert_token_in_token_out(call.episode, sub_engine)
        assert_logprobs_recompute(call.episode, tiny_sub[0], SUB_CFG)
        assert call.episode.trajectory.policy_version == 2
        assert len(call.episode.turns) >= 1
    assert sum(len(call.episode.turns) for call in calls) > len(calls)  # malformed turns got feedback and went on
