"""tests/vllm/: the vllm engine on vLLM's CPU build, in a venv of its own (`make test-vllm`; the main run never
collects this directory, tests/conftest.py). vLLM's engine core is a process of its own; it starts in about 16 s
here once its compile cache is warm (the first start of a model compiles, about 60 s), so each module shares one
engine. The model is tiny:main32 (head dim 32): vLLM's CPU attention takes head sizes 32, 64, 80, ... 512, not
tiny:main's 16 or tiny:sub's 12 (vllm/v1/attention/backends/cpu_attn.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from mgrpo_actors.engines import EngineConfig, SamplingParams, make_engine
from mgrpo_actors.engines.logprobs import token_log_probs
from mgrpo_actors.models.loader import load_model, load_tokenizer, resolve_model_dir

vllm = pytest.importorskip("vllm")

MODEL = "tiny:main32"
# Largest |vLLM's behaviour logprob - the learner's recomputation| allowed, float32 on both sides; measured on this
# CPU build (2026-12-01): at most 4.67e-5 over the 434 sampled tokens these tests compare (the session's last line
# says what a run measured). deploy/gpu/check.sh runs the same tests on a GPU (MGRPO_TEST_VLLM_DEVICE=cuda) with its
# own tolerance, and records what it measured.
LOGPROB_TOLERANCE = float(os.environ.get("MGRPO_TEST_VLLM_TOLERANCE", "1e-4"))
DEVICE = os.environ.get("MGRPO_TEST_VLLM_DEVICE") or None  # None: vLLM's CPU build
_MEASURED = {"tokens": 0, "rows": 0, "max": 0.0}  # over every `logprob_gap` of the session


@pytest.fixture(scope="session")
def model_dir():
    return resolve_model_dir(MODEL)


@pytest.fixture(scope="session")
def tokenizer(model_dir):
    return load_tokenizer(model_dir)


@pytest.fixture(scope="session")
def reference():
    """The transformers model the learner would score with (float32, CPU)."""
    model, _ = load_model(MODEL)
    return model


def new_engine(model_dir, tokenizer):
    """An engine on the test model, float32; a module's fixture closes it at the end (vLLM's processes stopped while
    pytest still captures their log lines; the engine's exit hook would stop them after that)."""
    return make_engine("vllm", model_dir, tokenizer, EngineConfig(device=DEVICE, dtype="float32"))


def prompt_ids(tokenizer, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


def learner_logprobs(model, prompt: list[int], generated: list[int], params: SamplingParams) -> torch.Tensor:
    """The learner's recomputation: one forward over prompt + generation, the same warpers (logprobs.py)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + generated])).logits[0, len(prompt) - 1 : -1]
    return token_log_probs(logits, torch.tensor(generated), params)


def logprob_gap(expected: np.ndarray, sampled: np.ndarray) -> float:
    """max |the learner's recomputation - vLLM's behaviour logprob| over one generation's tokens, recorded for the
    session's summary line (pytest_terminal_summary)."""
    gap = float(np.abs(np.asarray(expected) - np.asarray(sampled)).max()) if len(sampled) else 0.0
    _MEASURED["tokens"] += len(sampled)
    _MEASURED["rows"] += 1
    _MEASURED["max"] = max(_MEASURED["max"], gap)
    return gap


def pytest_terminal_summary(terminalreporter):
    if _MEASURED["rows"]:
        terminalreporter.write_line(
            f"max |vLLM - learner| behaviour logprob: {_MEASURED['max']:.2e} over {_MEASURED['tokens']} sampled tokens "
            f"in {_MEASURED['rows']} generations (tolerance {LOGPROB_TOLERANCE:g}, device {DEVICE or 'cpu'})"
        )
