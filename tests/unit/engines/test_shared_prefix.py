"""A prefix the rows of a batch share, held once (engines/shared_prefix.py, kv_cache.py): the engine samples the very
tokens it samples with every row holding its own copy, its behaviour logprobs still equal a plain forward pass, over
several turns and with rows joining a running batch; a gathered cache keeps each row's keys and values whatever part
of them the prefix holds; rows that do not start with the prefix ignore it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mgrpo_actors.engines import SamplingParams, token_log_probs
from mgrpo_actors.engines import kv_cache as kv_cache_module
from mgrpo_actors.engines.base import EngineConfig
from mgrpo_actors.engines.decode import block_of, forward_block
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.engines.kv_cache import RowCache, cache_shape, gathered
from mgrpo_actors.engines.shared_prefix import MIN_SHARED_COLUMNS
from mgrpo_actors.models.loader import load_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUESTIONS = ["Who founded Aldora?", "Where is the oldest bridge in the capital city of Brevik located?", "Hi"]


@pytest.fixture(scope="module", params=["tiny:main", "tiny:sub"])
def model_and_tokenizer(request):
    return load_model(request.param)


def _prompts(tokenizer, questions=QUESTIONS) -> list[list[int]]:
    """Chats under one long system prompt: what they share is well over MIN_SHARED_COLUMNS."""
    system = {"role": "system", "content": "You are the main agent; answer from the pages you read. " * 8}
    texts = [
        tokenizer.apply_chat_template(
            [system, {"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        for q in questions
    ]
    return [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]


def _recomputed(model, prompt: list[int], tokens: list[int], params: SamplingParams) -> np.ndarray:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    return token_log_probs(logits, torch.tensor(tokens), params).numpy()


def _unshared(monkeypatch) -> None:
    """Every row keeps its own copy of what it shares (the engine before shared prefixes)."""
    monkeypatch.setattr(kv_cache_module, "MIN_SHARED_COLUMNS", 10**9)


def _turns(engine, tokenizer, prompts, turns: int = 3):
    """Each turn's prompts and generations; the next turn's prompt is the history, a tool message and the opening."""
    tool = list(tokenizer("<|im_start|>tool\nnothing found<|im_end|>\n<|im_start|>assistant\n")["input_ids"])
    out = []
    for turn in range(turns):
        params = SamplingParams(temperature=0.9, top_k=40, max_new_tokens=10, seed=20 + turn)
        generations = engine.generate(prompts, params)
        out.append((prompts, params, generations, engine.cache))
        prompts = [p + g.token_ids + tool for p, g in zip(prompts, generations, strict=True)]
    return out


def test_rows_sample_what_they_sample_with_a_copy_each_and_score_as_a_plain_forward(model_and_tokenizer, monkeypatch):
    model, tokenizer = model_and_tokenizer
    prompts = [p for p in _prompts(tokenizer) for _ in range(2)]
    shared = _turns(HFEngine(model, tokenizer), tokenizer, prompts)
    _unshared(monkeypatch)
    copies = _turns(HFEngine(model, tokenizer), tokenizer, prompts)
    for (turn_prompts, params, generations, cache), (_, _, again, plain_cache) in zip(shared, copies, strict=True):
        assert cache.shared is not None and cache.shared.length >= MIN_SHARED_COLUMNS and all(cache.holds)
        assert plain_cache.shared is None
        assert cache.length < plain_cache.length  # the rows' own columns no longer hold the prefix
        assert [g.token_ids for g in generations] == [g.token_ids for g in again]
        for prompt, generation, other in zip(turn_prompts, generations, again, strict=True):
            np.testing.assert_allclose(generation.logprobs, other.logprobs, atol=1e-4, rtol=0)
            recomputed = _recomputed(model, prompt, generation.token_ids, params)
            np.testing.assert_allclose(generation.logprobs, recomputed, atol=1e-4, rtol=0)


def test_rows_joining_a_running_batch_under_a_shared_prefix_sample_what_they_sample_alone(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompts = _prompts(tokenizer, [f"question {i}: which city?" for i in range(6)])
    stops = tuple(range(0, 1024, 6))
    params = [SamplingParams(max_new_tokens=20, temperature=1.0, seed=50 + i, stop_token_ids=stops) for i in range(6)]
    batch = HFEngine(model, tokenizer, EngineConfig(continuous_batching=True)).continuous_batch()
    tickets, out, held_prefix = {}, {}, False
    for i in range(3):
        tickets[batch.submit(prompts[i], params[i])] = i
    pending = list(range(3, 6))
    while batch.busy or pending:
        if pending:
            i = pending.pop(0)
            tickets[batch.submit(prompts[i], params[i])] = i
        for ticket, generation in batch.step():
            out[tickets.pop(ticket)] = generation
        held_prefix |= batch._cache is not None and batch._cache.prefix_view() is not None
    assert held_prefix
    for i, prompt in enumerate(prompts):
        alone = HFEngine(model, tokenizer).generate([prompt], params[i])[0]  # one row: no prefix held apart
        assert out[i].token_ids == alone.token_ids, i
        np.testing.assert_allclose(out[i].logprobs, alone.logprobs, atol=1e-4, rtol=0)


def _filled(model, prompts: list[list[int]]) -> RowCache:
    cache = RowCache(cache_shape(model), len(prompts), 8)
    cache.reserve(max(len(p) for p in prompts))
    with torch.inference_mode():
        forward_block(model, cache, *block_of(prompts, 0, torch.device("cpu")))
    return cache


def _row_columns(cache: RowCache, row: int, layer: int) -> torch.Tensor:
    """Row `row`'s keys of `layer`, every token in order [kv heads, tokens, head dim] (the prefix's first)."""
    columns = torch.nonzero(cache.valid[row, : cache.length]).squeeze(-1)
    own = cache.keys[layer][row][:, columns]
    if cache.own_start(row):
        own = torch.cat([cache.shared.keys[layer].to(own.dtype), own], dim=1)
    return own


def test_a_gathered_cache_keeps_every_rows_keys_whatever_the_prefix_holds(model_and_tokenizer):
    model, _ = model_and_tokenizer
    base = [int(i) for i in torch.randint(5, 500, (90,), generator=torch.Generator().manual_seed(0))]
    prompts = [base + [7, 8, 9], base + [10, 11], base[:70] + [12]]
    plain = _filled(model, prompts)
    assert plain.shared is None  # fed together, each row holds its own columns
    narrowed = gathered(plain.shape, [(plain, 0, 93), (plain, 1, 92)], extra=0)
    assert narrowed.shared is not None and narrowed.shared.length == 90 and narrowed.length == 3
    again = gathered(plain.shape, [(narrowed, 1, 92), (narrowed, 0, 91)], extra=4)
    assert again.shared is narrowed.shared and again.length == 2  # kept, not copied again
    shorter = gathered(plain.shape, [(narrowed, 0, 93), (plain, 2, 71)], extra=0)  # shares only 70 tokens
    assert shorter.shared is not None and shorter.shared.length == 70
    single = gathered(plain.shape, [(narrowed, 1, 80)], extra=0)  # ends inside the prefix: copied out of it
    assert single.shared is None and single.length == 80
    loose = gathered(plain.shape, [(narrowed, 0, 93), (None, 0, 0)], extra=2)
    assert loose.holds == [True, False]
    for cache, row, source, source_row, n in (
        (narrowed, 1, plain, 1, 92),
        (again, 0, plain, 1, 92),
        (again, 1, plain, 0, 91),
        (shorter, 0, plain, 0, 93),
        (shorter, 1, plain, 2, 71),
        (single, 0, plain, 1, 80),
    ):
        assert cache.tokens[row] == source.tokens[source_row][:n]
        for layer in range(plain.shape.layers):
            torch.testing.assert_close(_row_columns(cache, row, layer), _row_columns(source, source_row, layer)[:, :n])


def test_a_row_that_does_not_start_with_the_prefix_ignores_it(model_and_tokenizer):
    """A cache whose first row holds the prefix and whose second holds nothing: fed a block each, the logits are
    those of each row fed alone from scratch."""
    model, _ = model_and_tokenizer
    base = [int(i) for i in torch.randint(5, 500, (80,), generator=torch.Generator().manual_seed(1))]
    plain = _filled(model, [base + [3, 4], base + [5]])
    held = gathered(plain.shape, [(plain, 0, 82), (plain, 1, 81)], extra=0)
    mixed = gathered(plain.shape, [(held, 0, 82), (None, 0, 0)], extra=40)
    assert mixed.holds == [True, False]
    other = [int(i) for i in torch.randint(5, 500, (30,), generator=torch.Generator().manual_seed(2))]
    with torch.inference_mode():
        logits = forward_block(model, mixed, *block_of([[6, 7], other], 0, torch.device("cpu")))
        first = model(torch.tensor([base + [3, 4, 6, 7]])).logits[0, -1]
        second = model(torch.tensor([other])).logits[0, -1]
    torch.testing.assert_close(logits[0], first, atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[1], second, atol=1e-4, rtol=0)
