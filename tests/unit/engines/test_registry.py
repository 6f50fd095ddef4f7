"""Engine selection: known names, a clear error for unknown ones, vllm importable and explicit without vLLM."""

import importlib
import sys

import pytest

from mgrpo_actors.engines import ENGINE_NAMES, EngineUnavailable, RolloutEngine, make_engine
from mgrpo_actors.models.loader import load_model, resolve_model_dir


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return load_model("tiny:main")


def test_unknown_engine_name_lists_the_known_ones(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match="unknown rollout engine 'sglang': known engines are hf, hf-generate, vllm"):
        make_engine("sglang", model, tokenizer)
    assert ENGINE_NAMES == ("hf", "hf-generate", "vllm")


def test_hf_engine_satisfies_the_protocol(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    engine = make_engine("hf", model, tokenizer)
    assert isinstance(engine, RolloutEngine) and engine.policy_version == 0
    with pytest.raises(TypeError, match="needs a loaded transformers model"):
        make_engine("hf", str(resolve_model_dir("tiny:main")), tokenizer)


def test_vllm_module_imports_without_vllm_and_selecting_it_says_how_to_install(monkeypatch, model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError, installed or not
    module = importlib.reload(importlib.import_module("mgrpo_actors.engines.vllm"))
    assert hasattr(module, "VLLMEngine")
    with pytest.raises(EngineUnavailable, match=r"pip install -r deploy/gpu/requirements\.txt"):
        make_engine("vllm", resolve_model_dir("tiny:main"), tokenizer)
    with pytest.raises(EngineUnavailable, match="select engine 'hf'"):
        make_engine("vllm", model, tokenizer)
