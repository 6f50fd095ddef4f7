"""Rows leave the batch as they finish (engines/decode.py NARROW_AT): once most rows of a call have stopped, the
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


def test_a_batch_is_narrowed_only_when_enough_rows_finished_with_steps_left():
    """Narrowing costs a copy of the cache rows: only when at most NARROW_AT of the rows still sample, at least
    NARROW_MIN_ROWS have finished, and NARROW_MIN_STEPS_LEFT steps remain."""
    worth = decode_module._worth_narrowing
    assert worth(rows=8, still=4, steps_left=8)
    assert not worth(rows=8, still=4, steps_left=7)
    assert not worth(rows=9, still=5, steps_left=8)  # more than half still sample
    assert not worth(rows=4, still=1, steps_left=8)  # 3 rows would leave


def _valid_kv(cache, row: int) -> list[torch.Tensor]:
    """Row `row`'s keys and values of its valid columns, every layer."""
    columns = torch.nonzero(cache.valid[row, : cache.length]).squeeze(-1)
    return [store[layer][row][:, columns] for store in (cache.keys, cache.values) for layer in range(len(cache.keys))]


def test_the_kept_cache_of_a_twice_narrowed_call_holds_the_whole_batchs_keys_and_values(
    model_and_tokenizer, narrowings
):
    """32 rows narrowed at least twice: every row's cached keys and values (valid columns, every layer) equal those
    the never-narrowed engine keeps, to fp32 rounding."""
    model, tokenizer = model_and_tokenizer
    narrowing, whole = _engines(model, tokenizer)
    prompts = (_prompts(tokenizer) * 2)[:32]
    params = _params(seed=3)
    narrowing.generate(prompts, params), whole.generate(prompts, params)
    assert len(narrowings) >= 2, narrowings
    for row in range(len(prompts)):
        for got, want in zip(_valid_kv(narrowing.cache, row), _valid_kv(whole.cache, row), strict=True):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def test_gathered_takes_rows_from_several_caches_and_leaves_empty_picks_empty():
    """kv_cache.gathered: row i holds the first n valid tokens of its (cache, row), right-aligned, whichever cache it
    comes from; a pick of no cache or of 0 tokens is an empty row."""
    from mgrpo_actors.engines.kv_cache import CacheShape, RowCache, gathered

    shape = CacheShape(layers=1, kv_heads=1, head_dim=2, dtype=torch.float32, device=torch.device("cpu"))
    first, second = RowCache(shape, rows=2, capacity=4), RowCache(shape, rows=1, capacity=4)
    for cache, base in ((first, 0.0), (second, 100.0)):
        width = 3
        values = base + torch.arange(cache.rows * width * 2, dtype=torch.float32).reshape(cache.rows, 1, width, 2)
        cache.update(values, -values, 0)
        valid = torch.tensor([[True, False, True]] * cache.rows)  # a hole in the middle
        cache.advance(torch.arange(cache.rows * width).reshape(cache.rows, width), valid)
    out = gathered(shape, [(second, 0, 2), (None, 0, 0), (first, 1, 1), (first, 0, 0)], extra=1)
    assert out.length == 2 and out.capacity == 3
    assert out.valid[:, :2].tolist() == [[True, True], [False, False], [False, True], [False, False]]
    assert out.tokens == [[0, 2], [], [3], []]
    torch.testing.assert_close(out.keys[0][0, 0, :2], second.keys[0][0, 0, [0, 2]])
    torch.testing.assert_close(out.keys[0][2, 0, 1], first.keys[0][1, 0, 0])
    torch.testing.assert_close(out.values[0][0, 0, :2], -second.keys[0][0, 0, [0, 2]])
    assert not out.keys[0][1].any() and not out.keys[0][3].any()  # empty rows stay zeros: finite holes
