"""Sampling on vLLM's CPU build: token ids in, stop ids, seeds, finish reasons as the hf engine's, and behaviour
logprobs equal to the learner's recomputation under the same warpers (temperature, top-k, top-p)."""

from __future__ import annotations

import numpy as np
import pytest

from mgrpo_actors.engines import SamplingParams
from tests.vllm.conftest import LOGPROB_TOLERANCE, learner_logprobs, logprob_gap, new_engine, prompt_ids

pytestmark = pytest.mark.timeout(600)

TEXTS = (
    "Who wrote the book about the river?",
    "Find the capital founded by Aldora in the first year, then answer.",
    "search",
)


@pytest.fixture(scope="module")
def engine(model_dir, tokenizer):
    engine = new_engine(model_dir, tokenizer)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [prompt_ids(tokenizer, text) for text in TEXTS]


def test_generates_from_token_ids_with_seeds(engine, prompts):
    params = SamplingParams(max_new_tokens=24, seed=7)
    first, again = engine.generate(prompts, params), engine.generate(prompts, params)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]  # a seed fixes each row's draws
    np.testing.assert_array_equal(first[0].logprobs, again[0].logprobs)
    other = engine.generate(prompts, SamplingParams(max_new_tokens=24, seed=8))
    assert [g.token_ids for g in other] != [g.token_ids for g in first]
    assert len({tuple(g.token_ids) for g in first}) == len(first)  # one seed per row, not the same draws
    for generation in first:
        assert 1 <= len(generation.token_ids) <= 24 and generation.policy_version == 0
        assert generation.logprobs.dtype == np.float32 and np.all(generation.logprobs <= 0)
        ends_on_eos = generation.token_ids[-1] in engine.eos_token_ids
        assert generation.finish_reason == ("stop" if ends_on_eos else "length")
        assert not set(generation.token_ids[:-1]) & engine.eos_token_ids


def _free_run(engine, prompt) -> tuple[int, list[int], int]:
    """(seed, a generation without stop ids, a position >= 3 of it whose id is neither eos nor seen before)."""
    for seed in range(3, 40):
        free = engine.generate([prompt], SamplingParams(max_new_tokens=24, seed=seed))[0].token_ids
        for position in range(3, len(free) - 1):
            if free[position] not in engine.eos_token_ids and free[position] not in free[:position]:
                return seed, free, position
    raise AssertionError("no seed gave a generation long enough to cut")


def test_stops_on_the_calls_stop_ids_and_keeps_the_stop_id(engine, prompts):
    seed, free, position = _free_run(engine, prompts[0])
    stop, cut = free[position], position + 1
    (stopped,) = engine.generate(prompts[:1], SamplingParams(max_new_tokens=24, seed=seed, stop_token_ids=(stop,)))
    assert (stopped.token_ids, stopped.finish_reason) == (free[:cut], "stop")
    # a stop id sampled as the last token the budget allows: "stop", as the hf engine says, not "length"
    (last,) = engine.generate(prompts[:1], SamplingParams(max_new_tokens=cut, seed=seed, stop_token_ids=(stop,)))
    assert (last.token_ids, last.finish_reason) == (free[:cut], "stop")
    (budget,) = engine.generate(prompts[:1], SamplingParams(max_new_tokens=cut - 1, seed=seed))
    assert (budget.token_ids, budget.finish_reason) == (free[: cut - 1], "length")


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_new_tokens=20, seed=1),
        SamplingParams(max_new_tokens=20, seed=2, temperature=0.7, top_k=5),
        SamplingParams(max_new_tokens=20, seed=3, temperature=1.3, top_p=0.8),
        SamplingParams(max_new_tokens=20, seed=4, temperature=0.5, top_k=20, top_p=0.9),
        SamplingParams(max_new_tokens=20, temperature=0.0),
    ],
    ids=["t1", "t0.7-k5", "t1.3-p0.8", "t0.5-k20-p0.9", "greedy"],
)
def test_behaviour_logprobs_are_the_learners_recomputation(engine, prompts, reference, params):
    worst = 0.0
    for prompt, generation in zip(prompts, engine.generate(prompts, params), strict=True):
        expected = learner_logprobs(reference, prompt, generation.token_ids, params).numpy()
        worst = max(worst, logprob_gap(expected, generation.logprobs))
    print(f"max |vLLM - learner| logprob ({params.temperature}, {params.top_k}, {params.top_p}): {worst:.2e}")
    assert worst <= LOGPROB_TOLERANCE
