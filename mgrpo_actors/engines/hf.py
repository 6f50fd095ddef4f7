"""The `hf` rollout engine: batched, left-padded `model.generate` on CPU or GPU.

Sampling goes through `sampling_warpers(params)` (logprobs.py) passed as the logits processors, with
transformers' own temperature/top-k/top-p switched off, so there is one definition of the sampling
distribution. A last processor records log-softmax of exactly the scores sampled from and, one step
later, picks out the logprob of the token that was sampled: memory stays O(batch x vocab) instead of
keeping every step's logits (`output_logits=True`), which for a real vocabulary and long rollouts
would not fit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, PreTrainedModel, PreTrainedTokenizerBase

from mgrpo_actors.engines.base import EngineConfig, Generation, SamplingParams, WeightsSource
from mgrpo_actors.engines.eos import eos_token_ids
from mgrpo_actors.engines.logprobs import sampling_warpers
from mgrpo_actors.log import get_logger
from mgrpo_actors.phases import GENERATE, timed
from mgrpo_actors.weights.files import check_fits, read_weights

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
    """Rollouts with transformers `generate`; weights reload in place with `load_state_dict`."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, cfg: EngineConfig | None = None):
        cfg = cfg or EngineConfig()
        if cfg.device is not None or cfg.dtype is not None:
            model.to(device=cfg.device, dtype=getattr(torch, cfg.dtype) if cfg.dtype else None)
        self.model = model.eval()
        self.eos_token_ids = eos_token_ids(tokenizer, model.generation_config)
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_token_ids)
        self.policy_version = 0
        # The engine owns the sampling distribution: a checkpoint's generation_config.json (repetition
        # penalty, min_p, transformers' default top_k=50, ...) must not bend it behind the logprobs' back.
        model.generation_config = GenerationConfig(
            bos_token_id=tokenizer.bos_token_id, eos_token_id=sorted(self.eos_token_ids), pad_token_id=self.pad_token_id
        )

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

    @timed(GENERATE)
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One sampled continuation per prompt, batched."""
        if not prompts:
            return []
        if any(len(prompt) == 0 for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
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

    def load_weights(self, weights: WeightsSource, version: int) -> None:
        """Copy new weights into the model's existing tensors and adopt `version`."""
        state = read_weights(weights)
        check_fits(self.model, state)  # before copying anything: a bad state dict must not half-load
        with torch.no_grad():
            self.model.load_state_dict(state, strict=False)
        log.info("weights_loaded", previous_version=self.policy_version, version=version, tensors=len(state))
        self.policy_version = version
