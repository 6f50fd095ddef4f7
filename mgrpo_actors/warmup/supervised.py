"""Format warm-up: a short supervised fine-tune on worked demonstrations before RL (stage 0).

A randomly initialised tiny model never writes a valid turn, so every reward is 0 and GRPO has no
signal; the usual cure (a supervised "cold start" before RL) is this. Each `Demonstration` is an
opening (system + user messages, exactly as an episode opens) and the turns that follow, assistant and
tool in alternation. It is tokenised with the rollouts' own `TrajectoryBuilder`, so the warmed-up model
learns the very ids it will later sample (a closing tag that is a stop id ends the turn, as in a
rollout); the loss is the mean cross-entropy over the assistant's own tokens only (loss mask 1).

Used by the learning test (tests/integration/test_it_learns.py) to give tiny models the turn format
(the RL run then has to learn *what* to answer), and by `mgrpo warmup` on the oracle's worked episodes
of the synthetic web (oracle.py) for small real models such as SmolLM2.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mgrpo_actors.agents.episode import action_stop_ids
from mgrpo_actors.agents.trajectory import TokenTrajectory, TrajectoryBuilder, encode_template
from mgrpo_actors.engines.base import Generation
from mgrpo_actors.log import get_logger

__all__ = ["Demonstration", "WarmupConfig", "demonstration_tokens", "save_warmed", "warm_up", "warm_up_trajectories"]

log = get_logger(__name__)


@dataclass(frozen=True)
class WarmupConfig:
    """The supervised fine-tune ([ours]: sized for the tiny models, seconds on a CPU)."""

    steps: int = 150  # optimizer steps
    batch_size: int = 8  # demonstrations per step, drawn at random with replacement
    lr: float = 3e-3  # AdamW learning rate (tiny models from scratch take a high one)
    seed: int = 0  # seeds the draws and dropout-free training order

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or not self.lr > 0:
            raise ValueError(f"warm-up needs steps >= 1, batch_size >= 1 and lr > 0, got {self}")


@dataclass(frozen=True)
class Demonstration:
    """One worked episode: the opening messages, then assistant and tool texts in alternation."""

    opening: tuple[dict[str, str], ...]  # system + user (the episode's opening_messages)
    turns: tuple[str, ...]  # assistant text, tool text, assistant text, …; starts and ends with the assistant

    def __post_init__(self) -> None:
        if len(self.turns) % 2 == 0:
            raise ValueError("a demonstration's turns alternate assistant/tool and end with the assistant's")


def _assistant_generation(tokenizer: PreTrainedTokenizerBase, text: str, stop_ids: tuple[int, ...]) -> Generation:
    """The ids a model writes for `text`: format tags as their own ids; end of turn where a rollout's ends."""
    ids = encode_template(tokenizer, text)
    if not ids or ids[-1] not in stop_ids:
        ids = [*ids, tokenizer.eos_token_id]  # no stop id at the end: the turn ends on the end-of-turn token
    return Generation(
        token_ids=ids, logprobs=np.zeros(len(ids), dtype=np.float32), finish_reason="stop", policy_version=0
    )


def demonstration_tokens(tokenizer: PreTrainedTokenizerBase, demo: Demonstration) -> TokenTrajectory:
    """The demonstration as a rollout would have built it: ids and the assistant-only loss mask."""
    stop_ids = action_stop_ids(tokenizer)
    builder = TrajectoryBuilder(tokenizer, demo.opening)
    for i, text in enumerate(demo.turns):
        if i % 2 == 0:
            builder.add_generation(_assistant_generation(tokenizer, text, stop_ids))
        else:
            builder.add_tool_output(text)
    return builder.finish()


def _sample(trajectory: TokenTrajectory) -> tuple[torch.Tensor, torch.Tensor]:
    """Input ids (1, n) and next-token targets (n - 1,), -100 where the loss mask is 0."""
    ids = torch.from_numpy(trajectory.token_ids.astype(np.int64))[None, :]
    mask = torch.from_numpy(trajectory.loss_mask.astype(bool))
    targets = torch.where(mask, ids[0], torch.tensor(-100))[1:]
    return ids, targets


def warm_up(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, demos: Sequence[Demonstration], cfg: WarmupConfig
) -> list[float]:
    """Fine-tune `model` in place on `demos`; returns the loss of every step."""
    if not demos:
        raise ValueError("warm-up needs at least one demonstration")
    return warm_up_trajectories(model, [demonstration_tokens(tokenizer, demo) for demo in demos], cfg)


def warm_up_trajectories(
    model: PreTrainedModel,
    trajectories: Sequence[TokenTrajectory],
    cfg: WarmupConfig,
    progress: Callable[[int, float], None] | None = None,
    compute_dtype: str = "float32",
) -> list[float]:
    """Fine-tune `model` in place on worked episodes already tokenised (loss on mask-1 tokens only);
    each step is the token-mean cross-entropy over `cfg.batch_size` episodes drawn with replacement,
    one forward pass per episode (no padding: episodes of a few thousand tokens and a 49k vocabulary
    would not fit as one padded batch). `progress(step, loss)` is called after every step.
    compute_dtype "bfloat16": the matrix products under CPU autocast, the weights and AdamW's state fp32."""
    if not trajectories:
        raise ValueError("warm-up needs at least one worked episode")
    draw = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    model.train()
    losses = []
    for step in range(cfg.steps):
        samples = [_sample(t) for t in draw.choices(trajectories, k=cfg.batch_size)]
        tokens = sum(int((targets != -100).sum()) for _, targets in samples)
        optimizer.zero_grad()
        total = 0.0
        for ids, targets in samples:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=compute_dtype == "bfloat16"):
                logits = model(input_ids=ids).logits[0, :-1].float()
            loss = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100, reduction="sum") / max(
                tokens, 1
            )
            loss.backward()
            total += loss.item()
        optimizer.step()
        losses.append(total)
        if progress is not None:
            progress(step, total)
        if step % 50 == 0 or step == cfg.steps - 1:
            log.info("warm-up", step=step, loss=round(total, 4))
    model.eval()
    return losses


def save_warmed(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path) -> Path:
    """The warmed-up model as a local HF directory (a model spec `load_model` accepts)."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
