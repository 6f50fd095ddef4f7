"""The model of `mgrpo bench grpo`: tiny:grpo (the stated Qwen2-style shape) after a short supervised
warm-up on plain completions, so that rewards differ within each group and the learner really trains.

A randomly initialised model never writes a valid <answer> block: every reward would be 0, no sample
would carry an advantage and the learner would take no optimizer step (mgrpo_actors/learner/trainer.py:
a batch with no signal takes none), which is not the work the stated configuration names. Warmed up on
completions of 12-44 tokens (`<think>` filler, then the right answer; ~40 % are longer than 32), the
model ends about a third of its sampled completions with a valid answer within 32 new tokens (R_M 0.1,
1.0 if right) and runs out of tokens on the rest (R_M 0): nearly every group of 8 has signal, and the
completions stay close to the 32-token budget. Built once per recipe and cached (models/cache.py).
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import torch

from mgrpo_actors.agents.prompts import PLAIN_PROMPT, opening_messages
from mgrpo_actors.agents.turn_format import format_answer
from mgrpo_actors.envs.arithmetic import arithmetic_questions
from mgrpo_actors.models.cache import build_once, cache_root
from mgrpo_actors.models.loader import load_model, resolve_model_dir
from mgrpo_actors.warmup.supervised import Demonstration, WarmupConfig, save_warmed, warm_up

__all__ = ["BASE_MODEL", "WARMUP", "bench_model_dir", "plain_demonstrations"]

BASE_MODEL = "tiny:grpo"  # the stated configuration's shape (models/tiny.py)
WARMUP = WarmupConfig(steps=100, batch_size=8, lr=3e-3)  # ~20 s on one core
THINK_WORDS = (2, 14)  # filler words per demonstration: 12-44 completion tokens with the answer block
_FILLER = "first add the two numbers then check the sum again and write it down so the result is clear".split()
_RECIPE_VERSION = 1  # bump when the demonstrations change: part of the cache key


def plain_demonstrations(count: int = 200, seed: int = 1) -> list[Demonstration]:
    """Worked plain completions of arithmetic questions: `<think>` filler of THINK_WORDS words, the answer."""
    draw = random.Random(seed)
    demos = []
    for question in arithmetic_questions(count, seed=seed):
        think = " ".join(draw.choice(_FILLER) for _ in range(draw.randint(*THINK_WORDS)))
        turn = f"<think>{think}</think>{format_answer(question.answer)}"
        demos.append(Demonstration(tuple(opening_messages(PLAIN_PROMPT, question.question)), (turn,)))
    return demos


def _build(directory: Path) -> None:
    model, tokenizer = load_model(BASE_MODEL)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a shared 2-core machine two threads thrash: 25 ms a pass alone, 40-200 ms with two
    try:
        warm_up(model, tokenizer, plain_demonstrations(), WARMUP)
    finally:
        torch.set_num_threads(threads)
    save_warmed(model, tokenizer, directory)


def bench_model_dir() -> Path:
    """The warmed-up bench model as a local HF directory (a model spec), built on first use."""
    recipe = (_RECIPE_VERSION, WARMUP, THINK_WORDS, _FILLER, PLAIN_PROMPT, resolve_model_dir(BASE_MODEL).name)
    key = hashlib.sha256(repr(recipe).encode()).hexdigest()[:12]
    return build_once(cache_root() / f"bench-grpo-{key}", _build)
