"""The `vllm` rollout engine, for GPU hosts (deploy/gpu/requirements.txt: vLLM 0.32.0 and what it needs).

Importable without vLLM: vLLM is imported when an engine is built, and a missing install raises
`EngineUnavailable` saying how to install it. Same contract as the hf engine: prompts as token ids,
sampled ids, behaviour logprobs of the distribution actually sampled from, finish reason, policy version.

- Sampling: vLLM applies the temperature; top-k and top-p are the project's warpers, run inside vLLM
  by a logits processor (vllm_sampling.py: vLLM's own top-k keeps exactly k tokens, ours keeps ties);
  the logprobs are vLLM's processed ones (`logprobs_mode="processed_logprobs"`: log-softmax of what
  was sampled from). Temperatures vLLM would change are refused (vllm_limits.py).
- Stopping: on the same eos ids as the hf engine (eos.py; the checkpoint's generation config is not
  given to vLLM) and the call's stop ids. A row whose last id is a stop id finished by "stop", as in
  the hf engine, whatever vLLM says (0.10.2 reports a stop id sampled as the last allowed token as
  "length"); a request vLLM aborted is an error, never a finished turn.
- New weights: full tensors only (`loads_deltas` is not set: weights/sync.py resolves a delta against its copy
  of the wire weights and hands over the changed tensors). Checked against the checkpoint first, from headers
  (vllm_weights.py: a file names every tensor, a state dict some or all, no unknown name, the same shapes, or
  nothing is copied), then loaded in place in every worker by `collective_rpc("mgrpo_load_weights", ...)`
  (vllm_worker.py), paths only crossing processes, no pickled callable. The prefix cache is emptied before and after;
  when vLLM cannot empty it (blocks in use), the reload is refused before copying, or, after copying,
  the engine refuses to generate until a reload succeeds: KV computed by old weights is never served
  under a new version.
- Placement: `EngineConfig.device` "cuda:N" is the GPU vLLM's processes see as their only one (vLLM
  itself always takes visible GPU 0); "cpu" only with a CPU build of vLLM. Before vLLM starts, the
  GPU's free memory is checked against `gpu_memory_utilization` (vLLM refuses to start with less free
  than that share of the whole GPU, e.g. beside a learner), with a message naming the setting.
- Processes: vLLM's engine core (a non-daemon process) and workers are stopped by `close()`, or at interpreter
  exit by a hook the engine registers: vLLM's own finalizer does not run before multiprocessing's exit hook
  joins an engine core still referenced, and `mgrpo run` hung after its last line.

Tested on vLLM's CPU build (`make test-vllm`, tests/vllm/); deploy/gpu/check.sh is the first GPU run.
"""

from __future__ import annotations

import atexit
import functools
import os
import tempfile
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
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
from mgrpo_actors.engines.vllm_limits import vllm_temperature_error
from mgrpo_actors.engines.vllm_sampling import warper_args
from mgrpo_actors.engines.vllm_weights import checkpoint_shapes, file_shapes, tied_names, write_state
from mgrpo_actors.log import get_logger
from mgrpo_actors.phases import GENERATE, timed
from mgrpo_actors.weights.files import check_shapes_fit, safetensors_files

__all__ = ["LOGITS_PROCESSOR", "WORKER_EXTENSION", "VLLMEngine", "cuda_visible_devices", "import_vllm", "memory_error"]

log = get_logger("mgrpo.engines.vllm")

# Import paths vLLM's processes resolve (vllm_worker.py, vllm_processor.py): nothing of ours is pickled into them.
WORKER_EXTENSION = "mgrpo_actors.engines.vllm_worker.WeightsWorkerExtension"
LOGITS_PROCESSOR = "mgrpo_actors.engines.vllm_processor:WarperLogitsProcessor"
_LOAD_RPC = "mgrpo_load_weights"


def import_vllm() -> ModuleType:
    """The vllm module, or `EngineUnavailable` saying how to install it."""
    try:
        import vllm
    except ImportError as error:
        raise EngineUnavailable(
            "rollout engine 'vllm' needs vLLM, which is not installed: on a GPU host, "
            "`pip install -r deploy/gpu/requirements.txt` and then `pip install --no-deps -e .` in a venv of their own "
            "(docs/deployment.md §GPU hosts); or select engine 'hf'"
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


def _is_cpu_build(vllm: ModuleType) -> bool:
    platforms = getattr(vllm, "platforms", None)
    if platforms is None:
        import vllm.platforms as platforms  # a submodule that may not be imported yet
    return bool(platforms.current_platform.is_cpu())


def cuda_visible_devices(device: str | None, cpu_build: bool, visible: str | None) -> str | None:
    """CUDA_VISIBLE_DEVICES for vLLM's processes so that `device` is their GPU 0; None: leave it as it is.
    `visible` is the current value (None: unset). ValueError for a device this build of vLLM cannot use."""
    if cpu_build:
        if device not in (None, "cpu"):
            raise ValueError(f"this vLLM is a CPU build: it runs on device 'cpu', not {device!r}")
        return None
    if device is None or device == "cuda":
        return None
    if not device.startswith("cuda:"):
        raise ValueError(f"vLLM's GPU build runs on a CUDA device ('cuda' or 'cuda:N'), not {device!r}")
    index = int(device.removeprefix("cuda:"))
    ids = [part.strip() for part in visible.split(",") if part.strip()] if visible is not None else None
    if ids is None:
        return str(index)
    if index >= len(ids):
        raise ValueError(f"device {device!r}: only {len(ids)} GPU(s) are visible (CUDA_VISIBLE_DEVICES={visible!r})")
    return ids[index]


@contextmanager
def _visible_devices(value: str | None) -> Iterator[None]:
    """CUDA_VISIBLE_DEVICES set to `value` while vLLM starts its processes (they inherit it), restored after."""
    if value is None:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def memory_error(free: int, total: int, share: float) -> str | None:
    """Why vLLM would refuse to start with `share` of a GPU of `total` bytes when `free` are free, or None."""
    if free >= share * total:
        return None
    gib = 1024**3
    return (
        f"vLLM needs gpu_memory_utilization {share} of the GPU ({share * total / gib:.1f} GiB of "
        f"{total / gib:.1f} GiB) free at start, and {free / gib:.1f} GiB are (another process, e.g. a learner, "
        f"holds the rest): lower the agent's vllm.gpu_memory_utilization to at most "
        f"{int(free / total * 100) / 100} or free the GPU"
    )


def _gpu_memory(physical: str | None) -> tuple[int, int] | None:
    """(free, total) bytes of a GPU by NVML (vLLM ships a copy of pynvml), without a CUDA context in this
    process; None when it cannot tell (no NVML, a MIG slice)."""
    try:
        from vllm.third_party import pynvml
    except ImportError:
        return None
    target = physical if physical is not None else (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    if target.startswith("MIG-"):
        return None
    try:
        pynvml.nvmlInit()
        try:
            handle = (
                pynvml.nvmlDeviceGetHandleByUUID(target)
                if target.startswith("GPU-")
                else pynvml.nvmlDeviceGetHandleByIndex(int(target))
            )
            info = pynvml.nvmlDeviceGetMemoryInfo(handle)
            return int(info.free), int(info.total)
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # NVML missing or a device it does not know: vLLM's own check still runs
        log.warning("gpu_memory_unknown", device=target, error=f"{type(exc).__name__}: {exc}")
        return None


def _shut_down(client: weakref.ref[Any]) -> None:
    engine_core = client()
    if engine_core is not None:
        engine_core.shutdown()


def _stop_at_exit(llm: Any) -> Callable[[], None] | None:
    """Register a hook that stops `llm`'s engine core process at interpreter exit; the hook (None: nothing to stop).

    vLLM's engine core is a non-daemon process that vLLM stops from a finalizer when its client is collected. An
    engine still referenced at exit (an agent's, in `mgrpo run`) is then never stopped before multiprocessing's
    exit hook joins that process, and the program hangs after its last line. atexit runs the hooks registered last
    first, and multiprocessing's is registered before any LLM exists: this one runs before it. It holds the client
    weakly, so it keeps nothing alive."""
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if client is None or not callable(getattr(client, "shutdown", None)):
        return None  # no engine core process (a stand-in, or vLLM's in-process client)
    hook = functools.partial(_shut_down, weakref.ref(client))
    atexit.register(hook)
    return hook


class VLLMEngine:
    """Rollouts with `vllm.LLM`; weights reload in place in the workers. `close()` stops vLLM's processes; an engine
    not closed is stopped at interpreter exit."""

    def __init__(
        self,
        model: PreTrainedModel | str | os.PathLike[str],
        tokenizer: PreTrainedTokenizerBase,
        cfg: EngineConfig | None = None,
    ):
        cfg = cfg or EngineConfig()
        self._vllm = import_vllm()
        self.model_dir = _model_dir(model)
        self.eos_token_ids = eos_token_ids(tokenizer, _generation_config(model, self.model_dir))
        # What every new version must match, name for name and shape for shape (read once, from headers).
        self._expected = checkpoint_shapes(self.model_dir)
        self._optional = tied_names(self.model_dir)
        cpu_build = _is_cpu_build(self._vllm)
        visible = cuda_visible_devices(cfg.device, cpu_build, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if not cpu_build:
            memory = _gpu_memory(visible)
            problem = memory and memory_error(*memory, cfg.gpu_memory_utilization)
            if problem:
                raise RuntimeError(problem)
        with _visible_devices(visible):
            self.llm = self._vllm.LLM(
                model=str(self.model_dir),
                tokenizer=str(self.model_dir),
                dtype=cfg.dtype or "auto",
                gpu_memory_utilization=cfg.gpu_memory_utilization,
                max_model_len=cfg.max_model_len,
                enforce_eager=cfg.enforce_eager,
                logprobs_mode="processed_logprobs",
                # vLLM's neutral defaults, not the checkpoint's generation_config.json: SamplingParams decides.
                generation_config="vllm",
                worker_extension_cls=WORKER_EXTENSION,
                logits_processors=[LOGITS_PROCESSOR],
            )
        self._exit_hook = _stop_at_exit(self.llm)
        self.policy_version = 0
        self._unusable: str | None = None  # why generate must refuse (a reload that did not complete, or closed)
        self._closed = False

    def close(self) -> None:
        """Stop vLLM's engine core and workers now (the engine cannot generate afterwards); idempotent."""
        hook, self._exit_hook = self._exit_hook, None
        if hook is not None:
            atexit.unregister(hook)
            hook()
        self._closed = True
        self._unusable = "the engine is closed: vLLM's processes are stopped"

    def _sampling_params(self, params: SamplingParams, index: int) -> Any:
        problem = vllm_temperature_error(params.temperature)
        if problem:
            raise ValueError(problem)
        return self._vllm.SamplingParams(
            n=1,
            temperature=params.temperature,
            # vLLM's own top-k/top-p stay off: the logits processor applies ours (vllm_sampling.py).
            extra_args=warper_args(params),
            max_tokens=params.max_new_tokens,
            stop_token_ids=sorted(self.eos_token_ids | set(params.stop_token_ids)),
            # One seed per request: the same seed on every request would sample identical rows.
            seed=None if params.seed is None else params.seed + index,
            logprobs=0,  # just the sampled token's logprob
            detokenize=False,
        )

    def _generation(self, request_output: Any, stop_ids: set[int]) -> Generation:
        completion = request_output.outputs[0]
        reason = completion.finish_reason
        if reason not in ("stop", "length"):  # "abort", or an unfinished request
            raise RuntimeError(
                f"vLLM did not finish a request (finish reason {reason!r}): it has no complete generation"
            )
        ids = list(completion.token_ids)
        finish: FinishReason = "stop" if ids and ids[-1] in stop_ids else "length"
        if reason == "stop" and finish == "length":
            raise RuntimeError(f"vLLM stopped a request on something other than a stop id (last id {ids[-1:]})")
        if completion.logprobs is None or len(completion.logprobs) != len(ids):
            raise RuntimeError("vLLM returned no logprob for some sampled token")
        logprobs = np.array([step[token].logprob for step, token in zip(completion.logprobs, ids)], dtype=np.float32)
        if not np.isfinite(logprobs).all():
            raise RuntimeError("a sampled token has logprob -inf: sampling and logprobs used different distributions")
        return Generation(token_ids=ids, logprobs=logprobs, finish_reason=finish, policy_version=self.policy_version)

    @timed(GENERATE)
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One sampled continuation per prompt; vLLM batches them itself."""
        if self._unusable:
            raise RuntimeError(self._unusable)
        if not prompts:
            return []
        if any(len(prompt) == 0 for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
        requests = [{"prompt_token_ids": list(prompt)} for prompt in prompts]
        sampling = [self._sampling_params(params, index) for index in range(len(prompts))]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        stop_ids = self.eos_token_ids | set(params.stop_token_ids)
        return [self._generation(output, stop_ids) for output in outputs]

    def _reset_prefix_cache(self) -> bool:
        return bool(self.llm.reset_prefix_cache())

    def load_weights(self, weights: WeightsSource, version: int) -> None:
        """Check new weights against the checkpoint (safetensors files: every tensor; a state dict: some or all),
        load them into the running model in place, empty the prefix cache, adopt `version`; a reload refused
        before copying leaves weights and version as they were."""
        if self._closed:
            raise RuntimeError(self._unusable)
        if isinstance(weights, Mapping) and not weights and self._unusable is None:
            # Nothing changed (weights/sync.py hands over the changed tensors of a delta that changed none): the
            # weights held are the new version's, and so is the KV cached from them; no copy, no cache reset.
            log.info("weights_loaded", previous_version=self.policy_version, version=version, tensors=[0])
            self.policy_version = version
            return
        with tempfile.TemporaryDirectory(prefix="mgrpo-vllm-weights-") as scratch:
            if isinstance(weights, Mapping):
                shapes = {name: tuple(tensor.shape) for name, tensor in weights.items()}
                check_shapes_fit(self._expected, shapes, self._optional, partial=True)
                files = [str(write_state(weights, Path(scratch) / "state.safetensors"))]
            else:
                files = [str(file) for file in safetensors_files(weights)]
                check_shapes_fit(self._expected, file_shapes(files), self._optional)
            if not self._reset_prefix_cache():
                raise RuntimeError(
                    f"weights of version {version} not loaded: vLLM could not empty its prefix cache (KV blocks "
                    "still in use); nothing was copied"
                )
            self._unusable = (
                f"a reload to version {version} did not complete: the model holds a mix of versions "
                f"{self.policy_version} and {version}; load a version again before generating"
            )
            complete = not isinstance(weights, Mapping)
            counts = self.llm.collective_rpc(_LOAD_RPC, args=(files, complete))  # one per worker (tensor-parallel rank)
        if not self._reset_prefix_cache():
            self._unusable = (
                f"weights of version {version} are loaded but vLLM could not empty its prefix cache: it may serve KV "
                "computed by the old weights; load a version again before generating"
            )
            raise RuntimeError(self._unusable)
        self._unusable = None
        log.info("weights_loaded", previous_version=self.policy_version, version=version, tensors=counts[:1])
        self.policy_version = version
