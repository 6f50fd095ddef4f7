"""The hf engine: batched generation without padding, behaviour logprobs = recomputation, stops, seeds, reloads."""

from pathlib import Path

import numpy as np
import pytest
import torch

from mgrpo_actors.engines import Generation, SamplingParams, make_engine, token_log_probs
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.models.loader import load_model

QUESTIONS = ["Who founded Aldora?", "Where is the oldest bridge in the capital city of Brevik located?", "Hi"]


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return load_model("tiny:main")


@pytest.fixture()
def engine(model_and_tokenizer) -> HFEngine:
    model, tokenizer = model_and_tokenizer
    return make_engine("hf", model, tokenizer)


@pytest.fixture(scope="module")
def prompts(model_and_tokenizer) -> list[list[int]]:
    _, tokenizer = model_and_tokenizer
    system = {"role": "system", "content": "You are the main agent."}
    chats = [[system, {"role": "user", "content": question}] for question in QUESTIONS]
    texts = [tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) for chat in chats]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def recomputed_logprobs(model, prompt: list[int], generation: Generation, params: SamplingParams) -> np.ndarray:
    """One unpadded forward pass over prompt + generated ids, same sampling distribution."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + generation.token_ids])).logits[0, len(prompt) - 1 : -1]
    return token_log_probs(logits, torch.tensor(generation.token_ids), params).numpy()


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, max_new_tokens=24, seed=1),
        SamplingParams(temperature=0.7, max_new_tokens=24, seed=2),
        SamplingParams(temperature=1.3, top_k=5, max_new_tokens=24, seed=3),
        SamplingParams(temperature=0.9, top_p=0.8, max_new_tokens=24, seed=4),
        SamplingParams(temperature=0.8, top_k=20, top_p=0.7, max_new_tokens=24, seed=5),
        SamplingParams(temperature=0.0, max_new_tokens=24),
    ],
    ids=["t1", "t0.7", "topk", "topp", "topk+topp", "greedy"],
)
def test_behaviour_logprobs_match_a_forward_pass_recomputation(engine, model_and_tokenizer, prompts, params):
    model, _ = model_and_tokenizer
    generations = engine.generate(prompts, params)
    assert len(generations) == len(prompts)
    for prompt, generation in zip(prompts, generations, strict=True):
        assert generation.logprobs.dtype == np.float32
        assert np.all(generation.logprobs <= 0)
        recomputed = recomputed_logprobs(model, prompt, generation, params)
        np.testing.assert_allclose(generation.logprobs, recomputed, atol=1e-4)


def test_top_k_and_top_p_restrict_what_is_sampled(engine, model_and_tokenizer, prompts):
    model, _ = model_and_tokenizer
    params = SamplingParams(temperature=1.0, top_k=2, max_new_tokens=32, seed=0)
    for prompt, generation in zip(prompts, engine.generate(prompts, params), strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + generation.token_ids])).logits[0, len(prompt) - 1 : -1]
        sampled = torch.tensor(generation.token_ids)
        assert (logits.topk(2, dim=-1).indices == sampled[:, None]).any(dim=-1).all()
        # Renormalising over the top 2 raises each kept token's probability above the unfiltered one.
        unfiltered = torch.log_softmax(logits, dim=-1).gather(-1, sampled[:, None]).squeeze(-1).numpy()
        assert np.all(generation.logprobs >= unfiltered - 1e-6)
        assert np.any(generation.logprobs > unfiltered + 1e-3)


def test_batched_generation_returns_each_sequence_unpadded(engine, prompts):
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    batched = engine.generate(prompts, params)
    for prompt, together in zip(prompts, batched, strict=True):
        (alone,) = engine.generate([prompt], params)  # a batch of one has no padding at all
        assert together.token_ids == alone.token_ids
        np.testing.assert_allclose(together.logprobs, alone.logprobs, atol=1e-4)
        assert together.finish_reason == alone.finish_reason


def test_stop_ids_end_a_sequence_and_are_kept_as_its_last_token(engine, prompts, model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    stops = tuple(range(0, len(tokenizer), 3))  # a third of the vocabulary: every row stops early
    params = SamplingParams(temperature=1.0, max_new_tokens=40, stop_token_ids=stops, seed=7)
    generations = engine.generate(prompts, params)
    assert any(len(g.token_ids) < 40 for g in generations)
    ends = {*stops, tokenizer.eos_token_id}  # eos always stops too
    for generation in generations:
        assert len(generation.token_ids) == len(generation.logprobs)
        if generation.finish_reason == "stop":
            assert generation.token_ids[-1] in ends
            assert not set(generation.token_ids[:-1]) & ends
        else:
            assert len(generation.token_ids) == 40 and not set(generation.token_ids) & ends


def test_eos_ends_a_sequence(engine, prompts, model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    params = SamplingParams(temperature=3.0, max_new_tokens=200, seed=11)  # hot enough to sample <|im_end|> soon
    generations = engine.generate(prompts * 4, params)
    stopped = [g for g in generations if g.finish_reason == "stop"]
    assert stopped
    for generation in stopped:
        assert generation.token_ids[-1] == tokenizer.eos_token_id
        assert tokenizer.eos_token_id not in generation.token_ids[:-1]


def test_a_seed_makes_sampling_reproducible_and_leaves_the_global_rng_alone(engine, prompts):
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=123)
    state = torch.random.get_rng_state()
    first = engine.generate(prompts, params)
    assert torch.equal(torch.random.get_rng_state(), state)
    again = engine.generate(prompts, params)
    other = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=12, seed=124))
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert [g.token_ids for g in first] != [g.token_ids for g in other]


def test_a_checkpoint_generation_config_does_not_bend_the_distribution(model_and_tokenizer, prompts):
    model, tokenizer = model_and_tokenizer
    model.generation_config.repetition_penalty = 5.0
    model.generation_config.top_k = 3
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=5)
    engine = make_engine("hf", model, tokenizer)
    for prompt, generation in zip(prompts, engine.generate(prompts, params), strict=True):
        recomputed = recomputed_logprobs(model, prompt, generation, params)
        np.testing.assert_allclose(generation.logprobs, recomputed, atol=1e-4)


def _perturbed_state(model, delta: float) -> dict[str, torch.Tensor]:
    return {name: tensor + delta for name, tensor in model.state_dict().items()}


def test_load_weights_from_a_state_dict_in_place_and_versions_generations(prompts):
    model, tokenizer = load_model("tiny:main")
    engine = make_engine("hf", model, tokenizer)
    embedding = model.get_input_embeddings().weight
    pointer, new_state = embedding.data_ptr(), _perturbed_state(model, 0.01)
    engine.load_weights(new_state, version=3)
    assert engine.policy_version == 3 and embedding.data_ptr() == pointer
    torch.testing.assert_close(embedding, new_state["model.embed_tokens.weight"], rtol=0, atol=0)
    generations = engine.generate(prompts, SamplingParams(max_new_tokens=4, seed=0))
    assert {g.policy_version for g in generations} == {3}


def test_load_weights_from_a_saved_directory(tmp_path: Path):
    model, tokenizer = load_model("tiny:main")
    trained, _ = load_model("tiny:main")
    trained.load_state_dict(_perturbed_state(trained, -0.02))
    trained.save_pretrained(tmp_path)  # what a learner publishes: safetensors, tied lm_head stored once
    engine = make_engine("hf", model, tokenizer)
    engine.load_weights(tmp_path, version=1)
    assert engine.policy_version == 1
    for (name, a), (_, b) in zip(model.state_dict().items(), trained.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_weights_that_do_not_fit_are_refused_before_anything_is_copied(tmp_path: Path):
    model, tokenizer = load_model("tiny:main")
    engine = make_engine("hf", model, tokenizer)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    bad = _perturbed_state(model, 1.0)
    bad["model.extra.weight"] = torch.zeros(1)
    with pytest.raises(ValueError, match="do not fit the model: unexpected.*model.extra.weight"):
        engine.load_weights(bad, version=9)
    sub_model, _ = load_model("tiny:sub")
    with pytest.raises(ValueError, match="wrong shape"):
        engine.load_weights(sub_model.state_dict(), version=9)
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        engine.load_weights(tmp_path, version=9)
    assert engine.policy_version == 0
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, before[name], rtol=0, atol=0, msg=name)


def test_empty_batches_and_empty_prompts(engine):
    assert engine.generate([], SamplingParams()) == []
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate([[1, 2], []], SamplingParams())


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(max_new_tokens=0), "max_new_tokens"),
    ],
)
def test_sampling_params_are_validated(bad, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**bad)
