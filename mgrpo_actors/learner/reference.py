"""The frozen reference policy π_ref of the KL term, kl_coef · KL(π_θ ‖ π_ref) (docs/method.md §Objective).

Why a module of its own: the reference is a second model beside the DeepSpeed engine, chosen at the
learner's start and never trained, and where it comes from matters on a resume. By default it is the
run's *starting* weights: the model as loaded from agents.<side>.model before any step. A resumed
learner loads that model again and then overwrites it with its checkpoint (or the weights its side
announced), so the learner actor copies the reference from it before resuming (`reference_model`),
never from a checkpoint.
`learners.<side>.reference` names another model spec instead (e.g. an earlier run's export).

It is a plain torch module, not under DeepSpeed: eval mode, no gradients, no dropout, the learner's
dtype, on the engine's device. Under ZeRO-3 with several ranks every rank therefore holds a whole copy
(ZeRO partitions only what its engine owns); that costs one model's weights per rank, which is less than
the engine's own optimizer state and was judged acceptable against gathering a partitioned reference
collectively on every micro-batch. Only built when kl_coef > 0: no memory cost otherwise. Its logprobs
are computed per micro-batch, without grad, by the same function as the policy's (forward.py), chunked
over the loss positions where the reference allows it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.learner.forward import chunkable, micro_batch_log_probs, no_dropout
from mgrpo_actors.learner.micro_batches import MicroBatch

__all__ = ["ReferencePolicy", "learner_dtype", "reference_model"]


def learner_dtype(cfg: LearnerConfig) -> torch.dtype:
    """The dtype the learner trains in (learners.<side>.dtype): the reference's too."""
    return torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32


def _vocab_size(module: torch.nn.Module) -> int:
    return int(getattr(getattr(module, "config", None), "vocab_size", 0) or 0)


def _loaded(spec: str, starting: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The weights of `spec` in `dtype` (resolve_model_dir: a ModelSpecError names what is missing; no chat
    template needed, the reference is never prompted), refused unless it scores the agent's vocabulary:
    KL per token compares the two models' logprobs of the same token ids."""
    from transformers import AutoModelForCausalLM  # only when a reference is named

    from mgrpo_actors.models.loader import resolve_model_dir

    module = AutoModelForCausalLM.from_pretrained(resolve_model_dir(spec), dtype=dtype, local_files_only=True)
    if _vocab_size(module) != _vocab_size(starting):
        raise ValueError(
            f"learner reference {spec!r} has a vocabulary of {_vocab_size(module)} tokens, the agent's model "
            f"{_vocab_size(starting)}: the KL term compares logprobs of the same token ids, so the reference must "
            "share the agent's tokenizer"
        )
    return module


def _frozen(module: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """`module` in `dtype`, eval mode, without gradients or dropout: it is only ever scored."""
    module = module.to(dtype=dtype).eval()
    module.requires_grad_(False)
    no_dropout(module)  # eval() already skips nn.Dropout; this also zeroes the `*dropout` floats layers read
    return module


def reference_model(
    cfg: LearnerConfig, objective: ObjectiveConfig, starting: torch.nn.Module
) -> torch.nn.Module | None:
    """The KL term's reference for a learner whose model is `starting` as loaded, before any step or resume:
    None when algo.objective.kl_coef is 0; the model of learners.<side>.reference when set; else a copy
    of `starting` (taken now, so a later resume into `starting` leaves it the run's starting weights).
    Frozen, in the learner's dtype, on the CPU until the trainer moves it to its device."""
    if objective.kl_coef == 0:
        return None
    dtype = learner_dtype(cfg)
    module = copy.deepcopy(starting) if cfg.reference is None else _loaded(cfg.reference, starting, dtype)
    return _frozen(module, dtype)


@dataclass(frozen=True)
class ReferencePolicy:
    """The reference module on the learner's device and how its logprobs are computed."""

    module: torch.nn.Module
    chunk: int | None  # learners.<side>.logprob_chunk_tokens where the reference is chunkable, else None

    @classmethod
    def on(cls, module: torch.nn.Module, cfg: LearnerConfig, device: Any) -> ReferencePolicy:
        """`module` (reference_model's) moved to `device`, chunked as the policy is when its architecture
        allows it (forward.chunkable, asked of the reference itself: it is a plain module)."""
        module = _frozen(module.to(device), learner_dtype(cfg))
        chunk = cfg.logprob_chunk_tokens
        return cls(module, chunk if chunk > 0 and chunkable(module, module, device) else None)

    def log_probs(self, mb: MicroBatch, device: Any) -> torch.Tensor:
        """(n, T − 1) log π_ref of `mb.targets` under `mb.sampling` (fp32), without grad; 0 off the loss
        positions when chunked (the objective reads only the loss positions)."""
        with torch.no_grad():
            return micro_batch_log_probs(self.module, self.module, mb, self.chunk, device)
