"""New weights on vLLM's CPU build: a reload changes what is sampled and adopts the version; a file missing a
tensor or naming an unknown one is refused before anything is copied; the prefix cache never serves KV computed
by old weights; top-k keeps the tokens tied with the k-th, as the learner does; a learner's full snapshots and
deltas reach the engine through weights/sync.py on a real nats-server. The engine runs with
VLLM_ALLOW_INSECURE_SERIALIZATION=0: nothing it sends to vLLM's processes is pickled."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from mgrpo_actors.config.learner import WeightsConfig
from mgrpo_actors.engines import SamplingParams
from mgrpo_actors.engines.logprobs import sampling_log_probs
from mgrpo_actors.weights.encoder import WeightsEncoder
from mgrpo_actors.weights.store import WeightsStore
from mgrpo_actors.weights.sync import PolicySync, latest_key
from tests.vllm.conftest import LOGPROB_TOLERANCE, learner_logprobs, logprob_gap, new_engine, prompt_ids

pytestmark = pytest.mark.timeout(600)

GREEDY = SamplingParams(max_new_tokens=16, temperature=0.0)


@pytest.fixture(scope="module")
def engine(model_dir, tokenizer):
    before = os.environ.get("VLLM_ALLOW_INSECURE_SERIALIZATION")
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "0"  # vLLM's processes inherit it
    try:
        engine = new_engine(model_dir, tokenizer)
        yield engine
        engine.close()
    finally:
        if before is None:
            os.environ.pop("VLLM_ALLOW_INSECURE_SERIALIZATION", None)
        else:
            os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = before


@pytest.fixture()
def learner(reference):
    """The reference model, its weights put back after the test (tests change them as the engine's)."""
    saved = {name: tensor.clone() for name, tensor in reference.state_dict().items()}
    yield reference
    reference.load_state_dict(saved)


@pytest.fixture(scope="module")
def prompt(tokenizer):
    return prompt_ids(tokenizer, "Who founded the oldest museum of the capital city by the river?")


def _wire_state(model) -> dict[str, torch.Tensor]:
    """A full snapshot as a learner sends it: every tensor, the tied lm_head left out."""
    return {name: tensor.clone() for name, tensor in model.state_dict().items() if name != "lm_head.weight"}


def _perturbed(model, seed: int, scale: float = 0.05) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: t + scale * torch.randn(t.shape, generator=generator) for name, t in _wire_state(model).items()}


def _matches_learner(engine, learner, prompt, params=GREEDY, record: bool = True) -> float:
    """max |the learner's recomputation - the engine's behaviour logprob| over one generation; `record`: count it in
    the session's measured gap (not for a generation that is meant to differ)."""
    (generation,) = engine.generate([prompt], params)
    expected = learner_logprobs(learner, prompt, generation.token_ids, params).numpy()
    if record:
        return logprob_gap(expected, generation.logprobs)
    return float(np.abs(expected - generation.logprobs).max())


def test_a_reload_changes_outputs_and_adopts_the_version(engine, learner, prompt, tmp_path):
    (before,) = engine.generate([prompt], GREEDY)
    new = _perturbed(learner, seed=1)
    save_file(new, str(tmp_path / "v1.safetensors"))
    engine.load_weights(tmp_path / "v1.safetensors", 1)
    learner.load_state_dict(new, strict=False)
    (after,) = engine.generate([prompt], GREEDY)
    assert after.policy_version == engine.policy_version == 1
    assert after.token_ids != before.token_ids
    assert _matches_learner(engine, learner, prompt) <= LOGPROB_TOLERANCE
    # the changed tensors alone (weights/sync.py hands an engine without deltas these): the others stay
    name = "model.layers.0.self_attn.q_proj.weight"
    changed = {name: new[name] + 0.3 * torch.randn(new[name].shape, generator=torch.Generator().manual_seed(2))}
    engine.load_weights(changed, 2)
    learner.load_state_dict(changed, strict=False)
    assert engine.policy_version == 2 and _matches_learner(engine, learner, prompt) <= LOGPROB_TOLERANCE


def test_a_reload_missing_or_naming_an_unknown_tensor_is_refused_before_anything_is_copied(
    engine, learner, prompt, tmp_path
):
    engine.load_weights(_wire_state(learner), 3)
    (before,) = engine.generate([prompt], GREEDY)
    new = _perturbed(learner, seed=3, scale=0.5)
    missing = {name: t for name, t in new.items() if name != "model.norm.weight"}
    unknown = {**new, "model.layers.7.mlp.up_proj.weight": torch.zeros(4, 4)}
    for what, state in (("missing", missing), ("unknown", unknown)):
        save_file(state, str(tmp_path / f"{what}.safetensors"))
        with pytest.raises(ValueError, match="weights do not fit the model"):
            engine.load_weights(tmp_path / f"{what}.safetensors", 4)
    with pytest.raises(ValueError, match="weights do not fit the model"):
        engine.load_weights(unknown, 4)
    (after,) = engine.generate([prompt], GREEDY)
    assert engine.policy_version == 3 and after.policy_version == 3
    assert after.token_ids == before.token_ids
    np.testing.assert_array_equal(after.logprobs, before.logprobs)  # not one weight was copied


def _cached_tokens(engine, prompt) -> int:
    sampling = engine._sampling_params(GREEDY, 0)
    (output,) = engine.llm.generate([{"prompt_token_ids": prompt}], [sampling], use_tqdm=False)
    return int(output.num_cached_tokens or 0)


def test_the_prefix_cache_never_serves_kv_of_old_weights(engine, learner, tokenizer, monkeypatch):
    long_prompt = prompt_ids(tokenizer, " ".join(["Aldora wrote the oldest book about the river city."] * 40))
    engine.load_weights(_wire_state(learner), 5)
    _cached_tokens(engine, long_prompt)
    assert _cached_tokens(engine, long_prompt) > 0  # the prefix cache is on and holds this prompt
    new = _perturbed(learner, seed=5)
    engine.load_weights(new, 6)
    learner.load_state_dict(new, strict=False)
    assert _cached_tokens(engine, long_prompt) == 0  # emptied by the reload: nothing computed by version 5
    assert _matches_learner(engine, learner, long_prompt) <= LOGPROB_TOLERANCE
    # The same reload without emptying the cache serves the old KV: what the engine's reset prevents.
    monkeypatch.setattr(engine, "_reset_prefix_cache", lambda: True)
    _cached_tokens(engine, long_prompt)
    newer = _perturbed(learner, seed=6)
    engine.load_weights(newer, 7)
    learner.load_state_dict(newer, strict=False)
    assert _cached_tokens(engine, long_prompt) > 0
    assert _matches_learner(engine, learner, long_prompt, record=False) > 10 * LOGPROB_TOLERANCE
    monkeypatch.undo()
    engine.load_weights(newer, 8)
    assert _matches_learner(engine, learner, long_prompt) <= LOGPROB_TOLERANCE


def test_top_k_keeps_the_tokens_tied_with_the_kth_as_the_learner_does(engine, learner, prompt):
    # Every embedding row (the tied lm_head too) equal to its pair's: each logit has a twin, so an odd top-k always
    # ends inside a tie. vLLM's Triton kernel would keep exactly k of them; our warpers keep k + 1.
    state = _wire_state(learner)
    embed = state["model.embed_tokens.weight"]
    pairs = embed.shape[0] // 2 * 2
    embed[1:pairs:2] = embed[0:pairs:2]
    engine.load_weights(state, 9)
    learner.load_state_dict(state, strict=False)
    params = SamplingParams(max_new_tokens=12, seed=11, temperature=2.0, top_k=3)  # flat: the tie carries mass
    (generation,) = engine.generate([prompt], params)
    expected = learner_logprobs(learner, prompt, generation.token_ids, params).numpy()
    assert logprob_gap(expected, generation.logprobs) <= LOGPROB_TOLERANCE
    # what keeping exactly k would have given: measurably different, so the check above has teeth
    with torch.no_grad():
        logits = learner(torch.tensor([prompt + generation.token_ids])).logits[0, len(prompt) - 1 : -1] / 2.0
    kept = sampling_log_probs(logits, SamplingParams(temperature=1.0, top_k=3))
    assert bool((torch.isfinite(kept).sum(-1) >= 4).all())  # the tie at the boundary is kept
    exactly_k = torch.full_like(logits, float("-inf")).scatter(-1, logits.topk(3).indices, logits.topk(3).values)
    exact = torch.log_softmax(exactly_k, -1).gather(-1, torch.tensor(generation.token_ids)[:, None]).squeeze(-1)
    assert np.abs(exact.numpy() - generation.logprobs).max() > 100 * LOGPROB_TOLERANCE


def test_full_snapshots_and_deltas_through_nats_reach_the_engine_as_full_weights(
    engine, learner, prompt, bus, tmp_path
):
    """weights/sync.py as an agent runs it, on a real nats-server (object store and KV): full snapshot, two deltas,
    full snapshot, in bf16 (the wire dtype of a bf16 engine) into this fp32 model. The engine takes no deltas: sync
    resolves each against its copy of the wire weights and hands over the changed tensors whole. The engine misses
    the first delta and is brought through it by the second's announcement; after each load it samples what the
    learner, holding the same wire weights, scores."""
    side, cfg = "main", WeightsConfig(full_every=3, keep_versions=1)
    published = WeightsStore(bus, side, cfg, tmp_path / "learner")
    encoder = WeightsEncoder(torch.bfloat16, cfg.full_every, {"lm_head.weight"})
    sync = PolicySync(bus, side, engine, WeightsStore(bus, side, cfg, tmp_path / "engine"))
    assert not sync.deltas
    state = {name: tensor.clone() for name, tensor in learner.state_dict().items()}
    generator = torch.Generator().manual_seed(12)
    first = engine.policy_version + 1
    for version in range(first, first + 4):
        for tensor in state.values():  # a sparse step: about 1 element in 20 of every tensor
            flat = tensor.view(-1)
            flat[torch.randint(0, flat.numel(), (flat.numel() // 20 + 1,), generator=generator)] += 0.05
        state["model.norm.weight"] += 0.01  # and one tensor changed throughout (a delta carries it whole)
        written = encoder.write(state, version, tmp_path / "learner" / f"v{version}.safetensors")
        announced = published.publish(written.path, version, version, base=written.base, sha256=written.sha256)
        bus.kv(bus.subjects.bucket(f"versions-{side}")).put(latest_key(side), announced)
        assert (announced.base is None) == (version in (first, first + 3))
        if version == first + 1:
            continue  # missed: the next announcement's chain goes through it
        sync.ensure(version)
        assert engine.policy_version == version
        learner.load_state_dict(encoder.last, strict=False)  # the wire weights, bf16 to fp32 as the engine casts
        assert _matches_learner(engine, learner, prompt) <= LOGPROB_TOLERANCE
        params = SamplingParams(max_new_tokens=12, seed=version, temperature=0.8, top_p=0.9)
        assert _matches_learner(engine, learner, prompt, params) <= LOGPROB_TOLERANCE
    assert sync.loads == 3
