"""Format warm-up: a short supervised fine-tune on worked demonstrations before RL (stage 0).

A randomly initialised tiny model never writes a valid turn, so every reward is 0 and GRPO has no
signal; the usual cure (a supervised "cold start" before RL) is this. Each `Demonstration` is an
opening (system + user messages, exactly as an episode opens) and the turns that follow, assistant and
tool in alternation. It is tokenised with the rollouts' own `TrajectoryBuilder`, so the warmed-up model
learns the very ids it will later sample (a closing tag that is a stop id ends the turn, as in a
rollout); the loss is the mean cross-entropy over the assistant's own tokens only (loss mask 1), or over every
token of a `TextSample` (a page, or a whole episode when pretraining a model from scratch).

Used by the learning test (tests/integration/test_it_learns.py) to give tiny models the turn format
(the RL run then has to learn *what* to answer), and by `mgrpo warmup` on the oracle's worked episodes
of the synthetic web (oracle.py) for small real models such as SmolLM2.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mgrpo_actors.agents.episode import action_stop_ids
from mgrpo_actors.agents.trajectory import TokenTrajectory, TrajectoryBuilder, encode_template
from mgrpo_actors.engines.base import Generation
from mgrpo_actors.learner.forward import chunkable
from mgrpo_actors.log import get_logger
from mgrpo_actors.warmup.checkpoint import TrainingCheckpoint, WarmupProgress
from mgrpo_actors.warmup.copying import CopySample
from mgrpo_actors.warmup.fp32_attention import fp32_attention

__all__ = [
    "Demonstration",
    "TextSample",
    "WarmupConfig",
    "demonstration_tokens",
    "final_turn_only",
    "save_warmed",
    "warm_up",
    "warm_up_trajectories",
]

log = get_logger(__name__)


@dataclass(frozen=True)
class WarmupConfig:
    """The supervised fine-tune ([ours]: sized for the tiny models, seconds on a CPU)."""

    steps: int = 150  # optimizer steps
    batch_size: int = 8  # demonstrations per step, drawn at random with replacement
    lr: float = 3e-3  # AdamW learning rate (tiny models from scratch take a high one)
    seed: int = 0  # seeds the draws and dropout-free training order
    # samples per forward pass, right-padded to the longest, a step's samples sorted by length first; 1 = one pass per
    # sample (no padding: episodes of a few thousand tokens over a 49k vocabulary would not fit as one padded batch)
    micro_batch: int = 1
    lr_ramp_steps: int = 0  # the lr rises linearly from lr/N to lr over the first N steps (0 = from the start)
    lr_decay: bool = False  # then falls linearly to a tenth of lr by the last step
    max_grad_norm: float = 0.0  # clip the gradient's norm to this (0 = no clipping)
    copy_steps: int = 0  # of `steps`, the first N train on the loop's `copies` alone (copying.py)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or not self.lr > 0:
            raise ValueError(f"warm-up needs steps >= 1, batch_size >= 1 and lr > 0, got {self}")
        if self.micro_batch < 1 or not 0 <= self.lr_ramp_steps < self.steps or not self.max_grad_norm >= 0:
            raise ValueError(
                f"warm-up needs micro_batch >= 1, 0 <= lr_ramp_steps < steps and max_grad_norm >= 0, got {self}"
            )
        if not 0 <= self.copy_steps < self.steps:
            raise ValueError(f"warm-up needs 0 <= copy_steps < steps (some steps on the episodes), got {self}")

    def lr_factor(self, step: int) -> float:
        """The share of `lr` that step `step` (from 0) takes: the ramp, then the decay (after the copying practice)."""
        if step < self.lr_ramp_steps:
            return (step + 1) / self.lr_ramp_steps
        if not self.lr_decay or step < self.copy_steps:  # the copying practice at the full lr: the decay spans the rest
            return 1.0
        begin = max(self.lr_ramp_steps, self.copy_steps)
        done = (step - begin) / max(self.steps - begin - 1, 1)
        return 1.0 - 0.9 * done


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


@dataclass(frozen=True)
class TextSample:
    """Ids to learn every token of: a page of the synthetic web, or a whole episode (warmup.all_tokens)."""

    token_ids: np.ndarray  # int [T]

    @property
    def loss_mask(self) -> np.ndarray:
        return np.ones(len(self.token_ids), dtype=np.uint8)


def final_turn_only(trajectory: TokenTrajectory) -> TokenTrajectory:
    """`trajectory` with its loss mask on its last turn only (the answer or report: where the agent copies what it
    read), for warmup.final_turns."""
    start, end = trajectory.turn_spans[-1]
    mask = np.zeros_like(trajectory.loss_mask)
    mask[start:end] = trajectory.loss_mask[start:end]
    return dataclasses.replace(trajectory, loss_mask=mask)


Sample = TokenTrajectory | TextSample | CopySample


def _padded(samples: Sequence[Sample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Input ids (b, n) right-padded with `pad_id` and next-token targets (b, n - 1): -100 where the loss mask is 0
    and on padding. No attention mask: the padding is on the right, so under causal attention a row's own tokens
    never attend to it, and its positions predict nothing (-100)."""
    width = max(len(sample.token_ids) for sample in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    targets = torch.full((len(samples), width), -100, dtype=torch.long)
    for row, sample in enumerate(samples):
        tokens = torch.from_numpy(sample.token_ids.astype(np.int64))
        ids[row, : len(tokens)] = tokens
        targets[row, : len(tokens)] = torch.where(torch.from_numpy(sample.loss_mask.astype(bool)), tokens, -100)
    return ids, targets[:, 1:]


def _summed_loss(
    model: PreTrainedModel, ids: torch.Tensor, targets: torch.Tensor, bf16: bool, learnt_only: bool
) -> torch.Tensor:
    """The cross-entropy summed over a micro-batch's learnt targets (not -100). learnt_only (when learner/forward.py
    `chunkable`: the logits are the output layer on the last hidden state): the output layer and the log-softmax run
    on those positions alone, not on every position of every row (on the comparison's episodes about a third learn;
    docs/benchmarks.md §The warm-up's step time). Causal attention and no mask: _padded."""
    learnt = targets != -100
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        if learnt_only:
            out = model(input_ids=ids, use_cache=False, output_hidden_states=True, logits_to_keep=1)
            logits = model.get_output_embeddings()(out.hidden_states[-1][:, :-1][learnt]).float()
            chosen = targets[learnt]
        else:
            logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
            logits, chosen = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
    return torch.nn.functional.cross_entropy(logits, chosen, ignore_index=-100, reduction="sum")


def warm_up(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, demos: Sequence[Demonstration], cfg: WarmupConfig
) -> list[float]:
    """Fine-tune `model` in place on `demos`; returns the loss of every step."""
    if not demos:
        raise ValueError("warm-up needs at least one demonstration")
    return warm_up_trajectories(model, [demonstration_tokens(tokenizer, demo) for demo in demos], cfg).losses


def _draws(
    draw: random.Random, trajectories: Sequence[Sample], mixed: Sequence[tuple[Sequence[Sample], float]], count: int
) -> list[Sample]:
    """`count` samples drawn with replacement: from each pool of `mixed` with its probability, else an episode."""
    pools = [(pool, share) for pool, share in mixed if pool and share > 0]
    if not pools:
        return list(draw.choices(trajectories, k=count))
    samples = []
    for _ in range(count):
        chance, chosen = draw.random(), trajectories
        for pool, share in pools:
            if chance < share:
                chosen = pool
                break
            chance -= share
        samples.append(draw.choice(chosen))
    return samples


def _accumulate(
    model: PreTrainedModel, samples: list[Sample], micro_batch: int, pad_id: int, bf16: bool, learnt_only: bool
) -> float:
    """Add the gradient of the token-mean cross-entropy over `samples` (`micro_batch` per padded pass) to the model's;
    returns that loss. A micro-batch with nothing to learn is skipped, so a step none of whose samples learns
    anything leaves every gradient None and AdamW moves no weight (rather than a step of weight decay alone)."""
    if micro_batch > 1:  # like lengths together: less padding (the step's token-mean loss is the same)
        samples.sort(key=lambda sample: len(sample.token_ids))
    batches = [_padded(samples[i : i + micro_batch], pad_id) for i in range(0, len(samples), micro_batch)]
    learnt = [int((targets != -100).sum()) for _, targets in batches]
    tokens, total = sum(learnt), 0.0
    for (ids, targets), count in zip(batches, learnt, strict=True):
        if not count:
            continue  # nothing learnt in it: no gradient
        loss = _summed_loss(model, ids, targets, bf16, learnt_only) / tokens
        loss.backward()
        total += loss.item()
    return total


def warm_up_trajectories(
    model: PreTrainedModel,
    trajectories: Sequence[TokenTrajectory | TextSample],
    cfg: WarmupConfig,
    progress: Callable[[int, float], None] | None = None,
    compute_dtype: str = "float32",
    texts: Sequence[TextSample] = (),
    text_share: float = 0.0,
    finals: Sequence[TokenTrajectory] = (),
    final_share: float = 0.0,
    checkpoint: TrainingCheckpoint | None = None,
    copies: Sequence[CopySample] = (),
    copy_share: float = 0.0,
) -> WarmupProgress:
    """Fine-tune `model` in place on worked episodes already tokenised (loss on mask-1 tokens only; every token of a
    TextSample), on `texts` (every token) for a `text_share` of the samples and on `finals` (their loss masks: the
    last turn, final_turn_only) for a `final_share` and on `copies` (copying.py) for a `copy_share`, after
    `cfg.copy_steps` steps on `copies` alone; each step is the token-mean
    cross-entropy over `cfg.batch_size` samples drawn with replacement, `cfg.micro_batch` of them per forward pass.
    `progress(step, loss)` is called after every step. compute_dtype "bfloat16": the matrix products under CPU
    autocast, the weights and AdamW's state fp32. With a `checkpoint` (checkpoint.py) the loop saves its state every
    so often and first resumes from a saved one. Returns every step's loss, the compute seconds (earlier attempts'
    included) and the steps it resumed at."""
    if not trajectories:
        raise ValueError("warm-up needs at least one worked episode")
    if (cfg.copy_steps or copy_share) and not copies:
        raise ValueError("copy_steps and copy_share train on copying samples: pass `copies`")
    draw = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, cfg.lr_factor)
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    learnt_only = chunkable(model, model)
    model.train()
    done = WarmupProgress() if checkpoint is None else checkpoint.load(model, optimizer, schedule, draw)
    began = time.perf_counter() - done.seconds
    with fp32_attention(model):  # fp32 attention under bf16 autocast: fp32_attention.py
        for step in range(done.step, cfg.steps):
            mixed = [(texts, text_share), (finals, final_share), (copies, copy_share)]
            samples = _draws(draw, trajectories, [(copies, 1.0)] if step < cfg.copy_steps else mixed, cfg.batch_size)
            optimizer.zero_grad()
            total = _accumulate(model, samples, cfg.micro_batch, pad_id, compute_dtype == "bfloat16", learnt_only)
            if cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            schedule.step()
            done.losses.append(total)
            done.step, done.seconds = step + 1, time.perf_counter() - began
            if checkpoint is not None and step + 1 < cfg.steps and checkpoint.due():
                checkpoint.save(step + 1, model, optimizer, schedule, draw, done)
            try:
                if progress is not None:
                    progress(step, total)  # raises KeyboardInterrupt to stop the warm-up (Ctrl-C)
            except KeyboardInterrupt:
                if checkpoint is not None:  # between steps: the state is whole, so keep it all
                    checkpoint.save(step + 1, model, optimizer, schedule, draw, done)
                raise
            if step % 50 == 0 or step == cfg.steps - 1:
                log.info("warm-up", step=step, loss=round(total, 4))
    model.eval()
    return done


def save_warmed(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path) -> Path:
    """The warmed-up model as a local HF directory (a model spec `load_model` accepts)."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
