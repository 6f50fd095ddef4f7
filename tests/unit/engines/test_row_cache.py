"""The hf engine's cached decoding (engines/decode.py, kv_cache.py, attention.py): a multi-turn episode's
next call starts from what the cache holds and samples exactly what a cold engine samples, with
behaviour logprobs equal to a plain forward pass; rows do not depend on which other rows share the batch;
new weights empty the cache; both tiny families (Llama- and Qwen2-style, grouped-query heads) decode on it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mgrpo_actors.engines import SamplingParams, make_engine, token_log_probs
from mgrpo_actors.engines.kv_cache import common_prefix
from mgrpo_actors.models.families import takes_external_cache
from mgrpo_actors.models.loader import load_model

QUESTIONS = ["Who founded Aldora?", "Where is the oldest bridge in the capital city of Brevik located?", "Hi"]


@pytest.fixture(scope="module", params=["tiny:main", "tiny:sub"])
def model_and_tokenizer(request):
    return load_model(request.param)


def _prompts(tokenizer) -> list[list[int]]:
    system = {"role": "system", "content": "You are the main agent."}
    chats = [[system, {"role": "user", "content": q}] for q in QUESTIONS]
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def _ids(prompt) -> list[int]:
    return list(prompt)


def _recomputed(model, prompt: list[int], tokens: list[int], params: SamplingParams) -> np.ndarray:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    return token_log_probs(logits, torch.tensor(tokens), params).numpy()


def _next_turn(tokenizer, prompt: list[int], generated: list[int], turn: int) -> list[int]:
    """The episode's next prompt: its history, the turn it sampled, a tool message, the assistant opening."""
    tool = tokenizer(f"<|im_start|>tool\nresult {turn}: nothing found<|im_end|>\n<|im_start|>assistant\n")
    return prompt + generated + list(tool["input_ids"])


def test_the_cached_path_is_the_one_taken(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    assert takes_external_cache(model)
    assert make_engine("hf", model, tokenizer).row_cache
    assert not make_engine("hf-generate", model, tokenizer).row_cache


def test_multi_turn_calls_reuse_the_cache_and_sample_what_a_cold_engine_samples(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    warm = make_engine("hf", model, tokenizer)
    prompts = [_ids(p) for p in _prompts(tokenizer)]
    stop = tuple(tokenizer("<|im_end|>")["input_ids"])
    for turn in range(3):
        params = SamplingParams(temperature=0.9, top_k=40, max_new_tokens=12, stop_token_ids=stop, seed=10 + turn)
        cached = warm.cache.match(prompts)[1] if warm.cache is not None else [0] * len(prompts)
        generations = warm.generate(prompts, params)
        cold = make_engine("hf", model, tokenizer).generate(prompts, params)
        assert [g.token_ids for g in generations] == [g.token_ids for g in cold]
        for prompt, generation, again in zip(prompts, generations, cold, strict=True):
            # the cached path sums in another order than a cold prefill: fp32 rounding, which differs by CPU
            # (1.3e-5 measured on an AMD EPYC where a Xeon stayed under 1e-5); 1e-4 is the engine's contract
            np.testing.assert_allclose(generation.logprobs, again.logprobs, atol=1e-4)
            recomputed = _recomputed(model, prompt, generation.token_ids, params)
            np.testing.assert_allclose(generation.logprobs, recomputed, atol=1e-4)
        if turn > 0:  # every row started from its own history: all but the newest tokens were cached
            assert all(n >= len(p) - 40 for n, p in zip(cached, prompts, strict=True)), cached
        prompts = [_next_turn(tokenizer, p, g.token_ids, turn) for p, g in zip(prompts, generations, strict=True)]


def test_a_row_samples_the_same_whatever_else_is_in_the_batch(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    engine = make_engine("hf", model, tokenizer)
    first, second, third = (_ids(p) for p in _prompts(tokenizer))
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=7)
    with_second = engine.generate([first, second], params)[0]
    with_third = engine.generate([first, third], params)[0]
    alone = make_engine("hf", model, tokenizer).generate([first], params)[0]
    assert with_second.token_ids == with_third.token_ids == alone.token_ids
    np.testing.assert_allclose(with_second.logprobs, alone.logprobs, atol=1e-4)  # fp32 rounding of another batch


def test_identical_prompts_in_one_call_sample_independently(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompt = _ids(_prompts(tokenizer)[1])
    out = make_engine("hf", model, tokenizer).generate([prompt] * 4, SamplingParams(max_new_tokens=16, seed=3))
    assert len({tuple(g.token_ids) for g in out}) > 1  # K rollouts of one question differ


def test_new_weights_empty_the_cache(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    engine = make_engine("hf", model, tokenizer)
    prompts = [_ids(p) for p in _prompts(tokenizer)]
    engine.generate(prompts, SamplingParams(max_new_tokens=4, seed=0))
    assert engine.cache is not None
    engine.load_weights({name: t.clone() for name, t in model.state_dict().items()}, version=2)
    assert engine.cache is None
    out = engine.generate(prompts, SamplingParams(max_new_tokens=4, seed=0))
    assert {g.policy_version for g in out} == {2}


def test_stops_budgets_and_greedy(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    engine = make_engine("hf", model, tokenizer)
    prompts = [_ids(p) for p in _prompts(tokenizer)]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
    a, b = engine.generate(prompts, greedy), make_engine("hf-generate", model, tokenizer).generate(prompts, greedy)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]  # the same argmax as transformers' generate
    for g in engine.generate(prompts, SamplingParams(max_new_tokens=6, seed=1)):
        stopped = g.finish_reason == "stop"
        assert len(g.token_ids) <= 6 and (stopped or len(g.token_ids) == 6)
        assert not stopped or g.token_ids[-1] in engine.eos_token_ids


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([9], [1]) == 0


def test_what_prompts_share_is_fed_once(model_and_tokenizer, monkeypatch):
    """K rollouts of two questions under one system prompt: the system prompt is computed once, each
    question once, then each row's last id; the samples still score as a plain forward pass scores them."""
    import mgrpo_actors.engines.decode as decode_module

    model, tokenizer = model_and_tokenizer
    system = {"role": "system", "content": "You are the main agent. " * 12}
    chats = [[system, {"role": "user", "content": q}] for q in QUESTIONS[:2]]
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    one, two = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts)
    prompts = [one] * 4 + [two] * 4
    fed = []
    forward = decode_module.forward_block

    def counting(model, cache, block, valid):
        fed.append(int(valid.sum()))
        return forward(model, cache, block, valid)

    monkeypatch.setattr(decode_module, "forward_block", counting)
    params = SamplingParams(temperature=1.0, max_new_tokens=1, seed=4)
    generations = make_engine("hf", model, tokenizer).generate(prompts, params)
    shared = common_prefix(one, two)
    assert shared >= 32
    assert fed[:3] == [shared, len(one) - 1 - shared + len(two) - 1 - shared, len(prompts)]
    for prompt, generation in zip(prompts, generations, strict=True):
        recomputed = _recomputed(model, prompt, generation.token_ids, params)
        np.testing.assert_allclose(generation.logprobs, recomputed, atol=1e-4)
