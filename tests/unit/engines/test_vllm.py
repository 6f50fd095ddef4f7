"""The vllm engine's own logic, on a stand-in `vllm` module (no GPU in CI): it stops on the same eos ids
as the hf engine, and a request vLLM aborted is an error, not a finished turn."""

import json
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
from transformers import GenerationConfig

from mgrpo_actors.engines import SamplingParams, make_engine
from mgrpo_actors.engines.eos import eos_token_ids
from mgrpo_actors.models.loader import load_model

IM_END, ENDOFTEXT = 2, 0  # the tiny tokenizer's eos, and a second end-of-turn id a checkpoint may list


class FakeLLM:
    """Records what the engine asks of vllm.LLM and answers every request with `finish_reason`."""

    finish_reason = "stop"

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.sampling = []

    def generate(self, requests, sampling, use_tqdm):
        self.sampling = sampling
        step = lambda token, logprob: {token: SimpleNamespace(logprob=logprob)}  # noqa: E731
        completion = SimpleNamespace(
            token_ids=[7, IM_END], logprobs=[step(7, -0.5), step(IM_END, -0.25)], finish_reason=self.finish_reason
        )
        return [SimpleNamespace(outputs=[completion]) for _ in requests]


@pytest.fixture()
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kwargs: SimpleNamespace(**kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    return module


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny:main")


@pytest.fixture()
def checkpoint(tmp_path):
    """A model directory whose generation config ends turns on two ids."""
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [IM_END, ENDOFTEXT]}))
    return tmp_path


def test_eos_ids_are_the_tokenizers_and_the_generation_configs(tiny):
    _, tokenizer = tiny
    assert eos_token_ids(tokenizer, GenerationConfig(eos_token_id=[ENDOFTEXT, 5])) == {IM_END, ENDOFTEXT, 5}
    assert eos_token_ids(tokenizer, GenerationConfig(eos_token_id=ENDOFTEXT)) == {IM_END, ENDOFTEXT}
    assert eos_token_ids(tokenizer, None) == {IM_END}


def test_vllm_stops_on_the_same_eos_ids_as_hf(fake_vllm, tiny, checkpoint):
    model, tokenizer = tiny
    model.generation_config.eos_token_id = [IM_END, ENDOFTEXT]
    hf = make_engine("hf", model, tokenizer)
    vllm = make_engine("vllm", checkpoint, tokenizer)
    assert vllm.eos_token_ids == hf.eos_token_ids == {IM_END, ENDOFTEXT}
    (generation,) = vllm.generate([[1, 5]], SamplingParams(stop_token_ids=(9,), seed=3))
    (sampling,) = vllm.llm.sampling
    assert sampling.stop_token_ids == [ENDOFTEXT, IM_END, 9]
    assert (generation.token_ids, generation.finish_reason) == ([7, IM_END], "stop")
    np.testing.assert_array_equal(generation.logprobs, np.array([-0.5, -0.25], dtype=np.float32))


@pytest.mark.parametrize("reason", ["abort", None])
def test_a_request_vllm_did_not_finish_is_an_error(fake_vllm, tiny, checkpoint, monkeypatch, reason):
    _, tokenizer = tiny
    engine = make_engine("vllm", checkpoint, tokenizer)
    monkeypatch.setattr(FakeLLM, "finish_reason", reason)
    with pytest.raises(RuntimeError, match=f"vLLM did not finish a request \\(finish reason {reason!r}\\)"):
        engine.generate([[1, 5]], SamplingParams())
    monkeypatch.setattr(FakeLLM, "finish_reason", "length")
    assert engine.generate([[1, 5]], SamplingParams())[0].finish_reason == "length"
