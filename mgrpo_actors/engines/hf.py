"""The `hf` rollout engine: a transformers model sampled in batches, on CPU or GPU, weights reloaded in
place.

Two decoding paths, one sampling distribution (`sampling_warpers(params)`, logprobs.py):
- `hf` (models of models/families.py EXTERNAL_CACHE_MODELS): our own loop (decode.py) on a key/value cache kept
  across calls (kv_cache.py): each prompt starts from the longest prefix of it the cache holds (the
  episode's history, or a shared system prompt), so a multi-turn episode's next turn costs its new
  tokens, not its whole history; attention through attention.py (grouped-query heads packed, not
  copied); in bf16 on a CPU, linear layers on weights packed once for oneDNN (packed_linear.py).
  Loading new weights empties the cache: keys computed by old weights are never reused.
- `hf-generate` (and any other model family): left-padded `model.generate` with the warpers as logits
  processors and transformers' own temperature/top-k/top-p switched off; a last processor records
  log-softmax of exactly the scores sampled from and, one step later, picks out the logprob of the token
  that was sampled (memory O(batch x vocab), not every step's logits).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, PreTrainedModel, PreTrainedTokenizerBase

from mgrpo_actors.engines import attention
from mgrpo_actors.engines.base import EngineConfig, Generation, SamplingParams, WeightsSource
from mgrpo_actors.engines.continuous import ContinuousBatch
from mgrpo_actors.engines.decode import decode, feeder, row_generators
from mgrpo_actors.engines.eos import eos_token_ids
from mgrpo_actors.engines.kv_cache import RowCache, cache_shape
from mgrpo_actors.engines.logprobs import sampling_warpers
from mgrpo_actors.engines.packed_linear import pack_linears
from mgrpo_actors.engines.prefill import prepared_cache
from mgrpo_actors.log import get_logger
from mgrpo_actors.models.families import takes_external_cache
from mgrpo_actors.phases import GENERATE, timed
from mgrpo_actors.weights.delta import SparseChange, WeightsDelta, check_delta_fits, set_all_elements
from mgrpo_actors.weights.files import StoredTensor, check_fits, read_into, safetensors_files, safetensors_header

__all__ = ["HFEngine", "left_pad"]

log = get_logger("mgrpo.engines.hf")


class _SampledLogprobRecorder(LogitsProcessor):
    """Runs last: keeps log-softmax of the final scores, and the logprob of what was sampled from them."""

    def __init__(self) -> None:
        self._previous: torch.Tensor | None = None  # [batch, vocab] log-probs of the previous step
        self._sampled: list[torch.Tensor] = []  # [batch] per finished step

    def _record(self, sampled_ids: torch.Tensor) -> None:
        assert self._previous is not None
        self._sampled.append(self._previous.gather(-1, sampled_ids[:, None]).squeeze(-1))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._previous is not None:
            self._record(input_ids[:, -1])  # the token sampled from the previous step's scores
        self._previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def logprobs(self, new_ids: torch.Tensor) -> torch.Tensor:
        """[batch, steps] logprobs of `new_ids` (the generated part of the sequences)."""
        if len(self._sampled) < new_ids.shape[1]:
            self._record(new_ids[:, -1])  # the last step has no next call to record it
        return torch.stack(self._sampled, dim=1)


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), each [batch, longest prompt], prompts right-aligned."""
    width = max(len(prompt) for prompt in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        attention_mask[row, width - len(prompt) :] = 1
    return input_ids.to(device), attention_mask.to(device)


@contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    if seed is None:
        yield
        return
    # Seed this call only; the engine's own RNG stream continues untouched afterwards.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def _trim(ids: list[int], logprobs: np.ndarray, stop_ids: set[int], version: int) -> Generation:
    """Cut a row after its first stop id; what follows is padding."""
    end = next((i + 1 for i, token in enumerate(ids) if token in stop_ids), None)
    reason = "length" if end is None else "stop"
    end = len(ids) if end is None else end
    if not np.isfinite(logprobs[:end]).all():
        raise RuntimeError("a sampled token has logprob -inf: sampling and logprobs used different distributions")
    return Generation(token_ids=ids[:end], logprobs=logprobs[:end].copy(), finish_reason=reason, policy_version=version)


class HFEngine:
    """Rollouts of a transformers model; weights reload in place (whole tensors copied, a delta's elements set).

    `use_generate` forces transformers' `generate` (engine name `hf-generate`); otherwise a model of
    EXTERNAL_CACHE_MODELS decodes on the engine's own cache."""

    loads_deltas = True  # load_weights takes a WeightsDelta against the version it holds (weights/sync.py)

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        cfg: EngineConfig | None = None,
        use_generate: bool = False,
    ):
        cfg = cfg or EngineConfig()
        if cfg.device is not None or cfg.dtype is not None:
            model.to(device=cfg.device, dtype=getattr(torch, cfg.dtype) if cfg.dtype else None)
        self.model = model.eval()
        self.packed = pack_linears(model)  # bf16 on a CPU: weights packed once for oneDNN (packed_linear.py)
        self.eos_token_ids = eos_token_ids(tokenizer, model.generation_config)
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_token_ids)
        self.policy_version = 0
        # The engine owns the sampling distribution: a checkpoint's generation_config.json (repetition
        # penalty, min_p, transformers' default top_k=50, ...) must not bend it behind the logprobs' back.
        model.generation_config = GenerationConfig(
            bos_token_id=tokenizer.bos_token_id, eos_token_id=sorted(self.eos_token_ids), pad_token_id=self.pad_token_id
        )
        self.narrow_finished_rows = cfg.narrow_finished_rows
        self.row_cache = not use_generate and takes_external_cache(model)
        # rollout/driver.py runs episodes on continuous_batch() when set (and the model decodes on our own cache)
        self.continuous_batching = cfg.continuous_batching and self.row_cache
        if cfg.continuous_batching and not self.row_cache:
            log.warning(
                "continuous batching is off: it needs a model the engine decodes on its own cache",
                model_type=model.config.model_type,
            )
        if self.row_cache:
            model.config._attn_implementation = attention.register()
        self.cache: RowCache | None = None  # what the last call left: the next starts from its prefixes
        self.rng = torch.Generator().manual_seed(0)  # rows of unseeded calls draw their seeds from here

    @property
    def device(self) -> torch.device:
        """Where the model's parameters live."""
        return next(self.model.parameters()).device

    def _generate_kwargs(self, params: SamplingParams, stop_ids: set[int]) -> dict[str, object]:
        kwargs: dict[str, object] = dict(
            max_new_tokens=params.max_new_tokens,
            eos_token_id=sorted(stop_ids),
            pad_token_id=self.pad_token_id,
            do_sample=not params.greedy,
        )
        if not params.greedy:
            # Neutral built-ins: temperature/top-k/top-p come from sampling_warpers only.
            kwargs.update(temperature=1.0, top_k=0, top_p=1.0)
        return kwargs

    def continuous_batch(self) -> ContinuousBatch:
        """A batch that rows join and leave one decode step at a time (engines/continuous.py)."""
        return ContinuousBatch(self)

    @timed(GENERATE)
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One sampled continuation per prompt, batched."""
        if not prompts:
            return []
        if any(len(prompt) == 0 for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
        if self.row_cache:
            return self._generate_cached(prompts, params)
        return self._generate_with_generate(prompts, params)

    def _generate_cached(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Each prompt from what the cache holds of it, its shared parts fed once (prefill.py); the cache then
        holds this call's rows."""
        with torch.inference_mode():
            cache, keep = prepared_cache(
                self.cache,
                cache_shape(self.model),
                prompts,
                params.max_new_tokens,
                feeder(self.model, self.pad_token_id),
            )
        self.cache = None  # a failure below must not leave a half-written cache to start from
        generators = row_generators(len(prompts), params.seed, self.rng)
        stop_ids = self.eos_token_ids | set(params.stop_token_ids)
        with torch.inference_mode():
            rows, cache = decode(
                self.model,
                cache,
                [prompt[n:] for prompt, n in zip(prompts, keep, strict=True)],
                params,
                stop_ids,
                generators,
                self.pad_token_id,
                narrow=self.narrow_finished_rows,
            )
        self.cache = cache
        return [Generation(r.token_ids, r.logprobs, r.finish_reason, self.policy_version) for r in rows]

    def _generate_with_generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        input_ids, attention_mask = left_pad(prompts, self.pad_token_id, self.device)
        recorder = _SampledLogprobRecorder()
        processors = sampling_warpers(params)
        processors.append(recorder)
        stop_ids = self.eos_token_ids | set(params.stop_token_ids)
        with torch.inference_mode(), _seeded(params.seed, self.device):
            sequences = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                logits_processor=processors,
                **self._generate_kwargs(params, stop_ids),
            )
        new_ids = sequences[:, input_ids.shape[1] :]
        logprobs = recorder.logprobs(new_ids).cpu().numpy().astype(np.float32)
        rows = new_ids.cpu().tolist()
        return [_trim(ids, row_lp, stop_ids, self.policy_version) for ids, row_lp in zip(rows, logprobs, strict=True)]

    def load_weights(self, weights: WeightsSource | WeightsDelta, version: int) -> None:
        """Copy new weights into the model's existing tensors and adopt `version`: safetensors files (every
        tensor, read one at a time), a state dict of some or all tensors, or a delta against the version the
        engine holds (weights/delta.py). Unknown names, wrong shapes, a file that lacks a tensor and a delta
        against another version are refused before anything is copied."""
        params = self.model.state_dict()
        whole: Mapping[str, torch.Tensor] = {}
        sparse: Mapping[str, SparseChange] = {}
        files: dict[Path, dict[str, StoredTensor]] = {}
        if isinstance(weights, WeightsDelta):
            if weights.base != self.policy_version:
                raise ValueError(
                    f"delta {weights.version} is against version {weights.base}, "
                    f"but the engine holds version {self.policy_version}"
                )
            check_delta_fits({name: t.shape for name, t in params.items()}, weights)
            whole, sparse = weights.whole, weights.sparse
        elif isinstance(weights, Mapping):
            check_fits(self.model, weights, partial=True)
            whole = weights
        else:
            files = {path: safetensors_header(path)[1] for path in safetensors_files(weights)}
            check_fits(
                self.model, {n: torch.empty(t.shape, device="meta") for s in files.values() for n, t in s.items()}
            )
        self.cache = None  # keys and values of the old weights
        with torch.no_grad():
            for path, stored in files.items():
                read_into(path, stored, params)
            for name, tensor in whole.items():
                params[name].copy_(tensor)
            set_all_elements([(params[name], change) for name, change in sparse.items()])
        if self.packed is not None:
            self.packed.repack()
        log.info(
            "weights_loaded",
            previous_version=self.policy_version,
            version=version,
            tensors=len(whole) + len(sparse) + sum(len(stored) for stored in files.values()),
            delta=isinstance(weights, WeightsDelta),
        )
        self.policy_version = version
