"""The `vllm` rollout engine, for GPU hosts (optional extra: `pip install .[vllm]`).

Importable without vLLM: vLLM is imported when an engine is built, and a missing install raises
`EngineUnavailable` naming the extra. Same contract as the hf engine: prompts as token ids, sampled
ids, behaviour logprobs of the distribution actually sampled from (`logprobs_mode="processed_logprobs"`:
after temperature and top-k/top-p; vLLM's default would return the raw model's), finish reason, policy
version. It stops on the same eos ids as the hf engine (eos.py): vLLM itself stops only on the
tokenizer's, since the checkpoint's generation config is not used. A request vLLM aborted is an error,
never a finished turn. New weights are loaded in place in the worker through `LLM.apply_model`; a
directory or file of safetensors is read inside the worker, so only its path crosses the process boundary.
Needs vLLM >= 0.10.2 (`logprobs_mode`). Not exercised by CI (no GPU there).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from mgrpo_actors.engines.base import (
    EngineConfig,
    EngineUnavailable,
    FinishReason,
    Generation,
    SamplingParams,
    WeightsSource,
)
from mgrpo_actors.engines.eos import eos_token_ids
from mgrpo_actors.log import get_logger
from mgrpo_actors.phases import GENERATE, timed
from mgrpo_actors.weights.files import safetensors_files

__all__ = ["VLLMEngine", "import_vllm"]

log = get_logger("mgrpo.engines.vllm")


def import_vllm() -> ModuleType:
    """The vllm module, or `EngineUnavailable` saying how to install it."""
    try:
        import vllm
    except ImportError as error:
        raise EngineUnavailable(
            "rollout engine 'vllm' needs vLLM, which is not installed: `pip install .[vllm]` on a GPU host, "
            "or select engine 'hf'"
        ) from error
    return vllm


def _model_dir(model: PreTrainedModel | str | os.PathLike[str]) -> Path:
    path = Path(model if isinstance(model, (str, os.PathLike)) else model.name_or_path)
    if not path.is_dir():
        raise ValueError(f"vllm loads models from a local directory; {str(path)!r} is not one")
    return path


def _generation_config(model: PreTrainedModel | str | os.PathLike[str], model_dir: Path) -> GenerationConfig | None:
    """The model's generation config: the loaded model's, or the directory's generation_config.json if any."""
    if isinstance(model, PreTrainedModel):
        return model.generation_config
    if (model_dir / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(model_dir, local_files_only=True)
    return None


def _finish_reason(reason: str | None) -> FinishReason:
    """vLLM's finish reason as ours; "abort" (or an unfinished request) has no generation to return."""
    if reason in ("stop", "length"):
        return reason
    raise RuntimeError(f"vLLM did not finish a request (finish reason {reason!r}): it has no complete generation")


def _load_state_into(tensors: dict[str, torch.Tensor], model: Any) -> int:
    """Runs in the vLLM worker: HF-named tensors into vLLM's (possibly fused) parameters."""
    return len(model.load_weights(weights=iter(tensors.items())))


def _load_files_into(files: list[str], model: Any) -> int:
    """Runs in the vLLM worker: read safetensors there, so no tensor is shipped between processes."""
    from safetensors.torch import load_file

    return sum(len(model.load_weights(weights=iter(load_file(file).items()))) for file in files)


class VLLMEngine:
    """Rollouts with `vllm.LLM`; weights reload in place in the worker."""

    def __init__(
        self,
        model: PreTrainedModel | str | os.PathLike[str],
        tokenizer: PreTrainedTokenizerBase,
        cfg: EngineConfig | None = None,
    ):
        cfg = cfg or EngineConfig()
        self._vllm = import_vllm()
        model_dir = _model_dir(model)
        self.eos_token_ids = eos_token_ids(tokenizer, _generation_config(model, model_dir))
        # apply_model ships a function to the engine-core process; vLLM only pickles callables when allowed.
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        self.llm = self._vllm.LLM(
            model=str(model_dir),
            tokenizer=str(model_dir),
            dtype=cfg.dtype or "auto",
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
            enforce_eager=cfg.enforce_eager,
            logprobs_mode="processed_logprobs",
            # vLLM's neutral defaults, not the checkpoint's generation_config.json: SamplingParams decides.
            generation_config="vllm",
        )
        self.policy_version = 0

    def _sampling_params(self, params: SamplingParams, index: int) -> Any:
        return self._vllm.SamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_new_tokens,
            stop_token_ids=sorted(self.eos_token_ids | set(params.stop_token_ids)),
            # One seed per request: the same seed on every request would sample identical rows.
            seed=None if params.seed is None else params.seed + index,
            logprobs=0,  # just the sampled token's logprob
            detokenize=False,
        )

    def _generation(self, request_output: Any) -> Generation:
        completion = request_output.outputs[0]
        ids = list(completion.token_ids)
        logprobs = np.array([step[token].logprob for step, token in zip(completion.logprobs, ids, strict=True)])
        return Generation(
            token_ids=ids,
            logprobs=logprobs.astype(np.float32),
            finish_reason=_finish_reason(completion.finish_reason),
            policy_version=self.policy_version,
        )

    @timed(GENERATE)
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One sampled continuation per prompt; vLLM batches them itself."""
        if not prompts:
            return []
        requests = [{"prompt_token_ids": list(prompt)} for prompt in prompts]
        sampling = [self._sampling_params(params, index) for index in range(len(prompts))]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        return [self._generation(output) for output in outputs]

    def load_weights(self, weights: WeightsSource, version: int) -> None:
        """Load new weights into the running model in place, drop KV cached under the old ones, adopt `version`."""
        if isinstance(weights, Mapping):
            tensors = {name: tensor.detach().cpu() for name, tensor in weights.items()}
            self.llm.apply_model(partial(_load_state_into, tensors))
        else:
            files = [str(file) for file in safetensors_files(weights)]
            self.llm.apply_model(partial(_load_files_into, files))
        self.llm.reset_prefix_cache()
        log.info("weights_loaded", previous_version=self.policy_version, version=version)
        self.policy_version = version
