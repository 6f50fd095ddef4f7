"""Rows leave the batch as they finish (engines/decode.py COMPACT_AT): once most rows of a call have stopped, the
rest decode in a batch of their own. Each row then samples the same tokens with the same behaviour logprobs as in
the whole batch (fp32, both tiny families), its logprobs equal a plain forward pass's, the cache the engine keeps
holds every row's ids as without narrowing, and the next turn of a multi-turn episode starts from it alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mgrpo_actors.engines import SamplingParams, token_log_probs
from mgrpo_actors.engines import decode as decode_module
from mgrpo_actors.engines.base import EngineConfig
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.models.loader import load_model

ROWS = 16
# About one id in six stops a row, so the rows of a call stop at many different steps (the tiny models' own
# end-of-turn token is rare).
STOP_IDS = tuple(range(0, 1024, 6))


@pytest.fixture(scope="module", params=["tiny:main", "tiny:sub"])
def model_and_tokenizer(request):
    return load_model(request.param)


@pytest.fixture
def narrowings(monkeypatch):
    """How many times a batch was narrowed, and to how many rows."""
    seen: list[int] = []
    narrowed = decode_module._narrowed

    def counting(batch, alive, extra):
        out = narrowed(batch, alive, extra)
        seen.append(len(out.rows))
        return out

    monkeypatch.setattr(decode_module, "_narrowed", counting)
    return seen


def _prompts(tokenizer) -> list[list[int]]:
    texts = [f"<|im_start|>user\nquestion {i}: which city?<|im_end|>\n<|im_start|>assistant\n" for i in range(ROWS)]
    return [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]


def _params(seed: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=40, temperature=1.0, seed=seed, stop_token_ids=STOP_IDS)


def _engines(model, tokenizer) -> tuple[HFEngine, HFEngine]:
    return (
        HFEngine(model, tokenizer, EngineConfig(narrow_finished_rows=True)),
        HFEngine(model, tokenizer, EngineConfig(narrow_finished_rows=False)),
    )


def test_a_row_samples_the_same_in_a_narrowed_batch_over_several_turns(model_and_tokenizer, narrowings):
    """Three turns of 16 episodes: each turn's tokens and logprobs are those of the never-narrowed engine, and each
    next turn starts from the kept cache (its rows hold the same ids as the other engine's)."""
    model, tokenizer = model_and_tokenizer
    narrowing, whole = _engines(model, tokenizer)
    prompts = _prompts(tokenizer)
    for turn in range(3):
        params = _params(seed=turn)
        got, want = narrowing.generate(prompts, params), whole.generate(prompts, params)
        for g, w in zip(got, want, strict=True):
            assert g.token_ids == w.token_ids and g.finish_reason == w.finish_reason
            np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-4, rtol=0)  # batched products round apart
        assert narrowing.cache.tokens == whole.cache.tokens
        held = narrowing.cache.valid[:, : narrowing.cache.length].sum(-1).tolist()
        assert held == [len(t) for t in narrowing.cache.tokens]
        tool = list(tokenizer("<|im_start|>tool\nnothing found<|im_end|>\n<|im_start|>assistant\n")["input_ids"])
        prompts = [p + g.token_ids + tool for p, g in zip(prompts, got, strict=True)]
    lengths = {len(g.token_ids) for g in got}
    assert narrowings and len(lengths) > 3, (narrowings, lengths)  # the rows did leave, at different steps


def test_a_narrowed_rows_behaviour_logprobs_equal_a_plain_forward_pass(model_and_tokenizer, narrowings):
    """The learner's recomputation of each sampled token's logprob (one forward over prompt and tokens, no cache)
    equals what the engine returned, for rows that finished in the whole batch and rows that went on narrowed."""
    model, tokenizer = model_and_tokenizer
    narrowing, _ = _engines(model, tokenizer)
    prompts, params = _prompts(tokenizer), _params(seed=7)
    generations = narrowing.generate(prompts, params)
    assert narrowings
    for prompt, generation in zip(prompts, generations, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + generation.token_ids])).logits[0, len(prompt) - 1 : -1]
        recomputed = token_log_probs(logits, torch.tensor(generation.token_ids), params).numpy()
        np.testing.assert_allclose(generation.logprobs, recomputed, atol=1e-4, rtol=0)


def test_a_batch_is_narrowed_only_when_enough_rows_finished_with_steps_left(narrowings):
    """Narrowing costs a copy of the cache rows: only when at most COMPACT_AT of the rows still sample, at least
    COMPACT_MIN_ROWS have finished, and COMPACT_MIN_STEPS_LEFT steps remain."""
    worth = decode_module._worth_narrowing
    alive = torch.tensor([True] * 4 + [False] * 4)
    assert worth(alive, steps_left=8, enabled=True)
    assert not worth(alive, steps_left=8, enabled=False)
    assert not worth(alive, steps_left=7, enabled=True)
    assert not worth(torch.tensor([True] * 5 + [False] * 4), steps_left=8, enabled=True)  # more than half sample
    assert not worth(torch.tensor([True] * 1 + [False] * 3), steps_left=8, enabled=True)  # 3 rows would leave
