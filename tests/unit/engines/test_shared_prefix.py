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
from mgrpo_actors.engines import shared_prefix as shared_prefix_module
from mgrpo_actors.engines.base import EngineConfig
from mgrpo_actors.engines.decode import block_of, forward_block
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.engines.kv_cache import RowCache, cache_shape, gathered
from mgrpo_actors.models.loader import load_model

pytestmark = pytest.mark.usefixtures("one_torch_thread", "small_prefixes_held_once")

# The tiny models' rows and prompts are few and short: below the reads that make a prefix held once pay for SmolLM2
# (kv_cache_module.MIN_SHARED_READS), so these tests hold one once from this many.
SMALL_READS = 64


@pytest.fixture
def small_prefixes_held_once(monkeypatch):
    monkeypatch.setattr(kv_cache_module, "MIN_SHARED_READS", SMALL_READS)


QUESTIONS = ["Who founded Aldora?", "Where is the oldest bridge in the capital city of Brevik located?", "Hi"]


@pytest.fixture(scope="module", params=["tiny:main", "tiny:sub"])
def model_and_tokenizer(request):
    return load_model(request.param)


def _prompts(tokenizer, questions=QUESTIONS) -> list[list[int]]:
    """Chats under one long system prompt (over 100 tokens shared)."""
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
    monkeypatch.setattr(kv_cache_module, "MIN_SHARED_READS", 10**9)


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
        assert cache.shared is not None and cache.shared.length >= 100 and all(cache.holds)
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


def test_rows_held_after_a_continuous_batch_count_their_prefix_once(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    batch = HFEngine(model, tokenizer, EngineConfig(continuous_batching=True)).continuous_batch()
    for i, prompt in enumerate(_prompts(tokenizer)):
        batch.submit(prompt, SamplingParams(max_new_tokens=6, temperature=1.0, seed=i))
    while batch.busy:
        batch.step()
    prefixes = {id(held.cache.shared): held.cache.shared for held in batch._held}
    assert len(batch._held) == 3 and len(prefixes) == 1 and None not in prefixes.values()
    (prefix,) = prefixes.values()
    assert prefix.nbytes == 2 * len(prefix.keys) * prefix.keys[0].numel() * 4  # keys and values, float32
    assert batch._held_bytes() == sum(held.bytes for held in batch._held) + prefix.nbytes


def _filled(model, prompts: list[list[int]]) -> RowCache:
    cache = RowCache(cache_shape(model), len(prompts), 8)
    cache.reserve(max(len(p) for p in prompts))
    with torch.inference_mode():
        forward_block(model, cache, *block_of(prompts, 0, torch.device("cpu")))
    return cache


def _row_columns(cache: RowCache, row: int, layer: int) -> torch.Tensor:
    """Row `row`'s keys of `layer`, every token in order [kv heads, tokens, head dim] (the prefix's first)."""
    return _row_sequence(cache, row)[layer]


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


def test_a_prefix_is_held_once_only_where_enough_rows_read_it(model_and_tokenizer, monkeypatch):
    monkeypatch.setattr(kv_cache_module, "MIN_SHARED_READS", shared_prefix_module.MIN_SHARED_READS)  # the real one
    model, _ = model_and_tokenizer
    base = [int(i) for i in torch.randint(5, 500, (90,), generator=torch.Generator().manual_seed(3))]
    rows = shared_prefix_module.MIN_SHARED_READS // 90 + 1  # 29 rows x 90 columns: just enough to make one
    plain = _filled(model, [base + [5 + r] for r in range(rows)])
    many = gathered(plain.shape, [(plain, r, 91) for r in range(rows)], extra=0)
    assert many.shared is not None and many.shared.length == 90 and many.length == 1
    assert gathered(plain.shape, [(many, r, 91) for r in range(rows)], extra=0).shared is many.shared
    half = shared_prefix_module.MIN_SHARED_READS // 2 // 90 + 1  # 15 rows x 90: just enough to keep it
    kept = gathered(plain.shape, [(many, r, 91) for r in range(half)] + [(None, 0, 0)], extra=0)
    assert kept.shared is many.shared and kept.holds == [True] * half + [False]
    fewer = gathered(plain.shape, [(many, r, 91) for r in range(half - 1)] + [(None, 0, 0)], extra=0)
    assert fewer.shared is None and fewer.length == 91  # 14 x 90, the empty pick not counted: copied back
    too_few_to_make = gathered(plain.shape, [(plain, r, 91) for r in range(rows - 1)], extra=0)  # 28 x 90
    assert too_few_to_make.shared is None
    assert gathered(plain.shape, [(many, 3, 91)], extra=0).shared is None
    assert gathered(plain.shape, [(many, 3, 91)], extra=0, keep_prefix=True).shared is many.shared  # a held row
    for row in (0, half - 2):
        for layer in range(plain.shape.layers):
            torch.testing.assert_close(_row_columns(fewer, row, layer), _row_columns(plain, row, layer))


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


def _row_sequence(cache: RowCache, row: int) -> list[torch.Tensor]:
    """Row `row`'s keys then values of every layer, every token in order (the prefix's first)."""
    columns = cache.own_columns(row)
    out = []
    for store, shared in ((cache.keys, "keys"), (cache.values, "values")):
        for layer in range(cache.shape.layers):
            own = store[layer][row][:, columns]
            if cache.own_start(row):
                own = torch.cat([getattr(cache.shared, shared)[layer].to(own.dtype), own], dim=1)
            out.append(own)
    return out


def test_random_gathers_keep_every_rows_keys_values_and_positions():
    """Gathers of random picks (several caches holding different prefixes or none, rows cut before, at and after a
    prefix, nothing picked, one pick) and forwards on them: every row holds the keys and values of its tokens as a
    row fed alone, its next position is its length, and its logits are a plain forward pass's."""
    import random

    model, _ = load_model("tiny:main")
    HFEngine(model, _)  # registers the engine's attention on the model
    rng = random.Random(0)
    cpu = torch.device("cpu")
    base = [rng.randrange(5, 800) for _ in range(110)]
    roots = [base[:k] + [rng.randrange(5, 800) for _ in range(rng.randrange(1, 30))] for k in (0, 63, 64, 80, 110, 110)]
    pool = [_filled(model, roots)]
    alone: dict[tuple[int, ...], list[torch.Tensor]] = {}
    held_prefix = 0

    def check(cache: RowCache) -> None:
        for row, tokens in enumerate(cache.tokens):
            assert int(cache.valid[row, : cache.length].sum()) + cache.own_start(row) == len(tokens)
            if tokens:
                if tuple(tokens) not in alone:
                    alone[tuple(tokens)] = _row_sequence(_filled(model, [tokens]), 0)
                for got, want in zip(_row_sequence(cache, row), alone[tuple(tokens)], strict=True):
                    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
        positions = cache.positions(torch.ones(cache.rows, 1, dtype=torch.bool))
        assert positions[:, 0].tolist() == [len(tokens) for tokens in cache.tokens]

    for _ in range(60):
        picks = []
        for _ in range(rng.choice([1, 2, 3, 5])):
            cache = rng.choice(pool)
            sharing = [r for r, tokens in enumerate(cache.tokens) if tokens[:64] == base[:64]]
            row = rng.choice(sharing) if sharing and rng.random() < 0.85 else rng.randrange(cache.rows)
            length = len(cache.tokens[row])
            cuts = [0, length, rng.randrange(length + 1), 63, 64, 65]
            cuts += [p.shared.length + d for p in pool if p.shared is not None for d in (-1, 0, 1)]
            if length >= 64 and rng.random() < 0.7:  # mostly after the common opening, so that prefixes form
                cuts = [cut for cut in cuts if cut >= 64] + [length]
            cut = max(0, min(length, rng.choice(cuts)))
            picks.append((cache, row, cut) if rng.random() > 0.1 else (None, 0, 0))
        fresh = gathered(pool[0].shape, picks, extra=rng.choice([0, 3]))
        held_prefix += fresh.shared is not None
        assert fresh.tokens == [c.tokens[r][:n] if c is not None else [] for c, r, n in picks]
        check(fresh)
        if rng.random() < 0.4:
            suffixes = [[rng.randrange(5, 800) for _ in range(rng.choice([1, 3]))] for _ in picks]
            fresh.reserve(3)
            with torch.inference_mode():
                logits = forward_block(model, fresh, *block_of(suffixes, 0, cpu))
                for row, tokens in enumerate(fresh.tokens):
                    plain = model(torch.tensor([tokens])).logits[0, -1]
                    torch.testing.assert_close(logits[row], plain, atol=1e-4, rtol=0)
            check(fresh)
        pool = (pool + [fresh])[-8:]
    assert held_prefix >= 15  # most gathers of rows under the common opening hold it once
