"""Benchmark: alignment + group advantages for B queries × K rollouts × D slots, next to a model forward.

What is measured (CPU, in this process):
  algo     align() of every rollout's sub-trajectory call ids to D (an AlignmentPlan), gather of R_S
           onto the slots, main advantages (B, K) and sub advantages (B, K, D); best of a few repeats.
           d_k ~ Poisson(3).
  forward  a small LlamaForCausalLM built from config (no weights downloaded), no grad, on a
           sub-sample of the B·K·D sequences, then scaled linearly to all B·K·D sequences. A learner
           step (forward + backward + optimiser) costs more than this forward, so the comparison
           favours the model side.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from mgrpo_actors.algo.advantages import main_advantages, sub_advantages
from mgrpo_actors.algo.alignment import align
from mgrpo_actors.algo.config import AdvantageConfig


@dataclass(frozen=True)
class BenchShape:
    queries: int
    k: int
    d: int
    # Tokens per sequence in the forward.
    seq_len: int
    # Sequences actually run through the model; the forward time is scaled from these.
    forward_sequences: int
    hidden: int
    layers: int
    vocab: int
    repeats: int


FULL = BenchShape(queries=1024, k=8, d=8, seq_len=512, forward_sequences=8, hidden=256, layers=4, vocab=8192, repeats=3)
QUICK = BenchShape(queries=64, k=8, d=8, seq_len=64, forward_sequences=2, hidden=64, layers=2, vocab=512, repeats=1)


def _synthetic_rollouts(shape: BenchShape, rng: np.random.Generator):
    """Call ids per (query, rollout), as the rollout code names them ("r{k}.t{i}", unique only within a
    query), rewards R_M (B, K) and R_S per sub-trajectory in the plan's `ids` order."""
    calls = rng.poisson(3.0, size=(shape.queries, shape.k))
    sub_ids = [[[f"r{k}.t{i}" for i in range(n)] for k, n in enumerate(row)] for row in calls.tolist()]
    main_rewards = rng.choice([0.0, 0.1, 1.0], size=(shape.queries, shape.k))
    sub_rewards = rng.random(int(calls.sum()))
    return sub_ids, main_rewards, sub_rewards


def _time_algo(shape: BenchShape) -> dict[str, float]:
    rng = np.random.default_rng(0)
    sub_ids, main_rewards, sub_rewards = _synthetic_rollouts(shape, rng)
    cfg = AdvantageConfig()
    best = {"align_s": float("inf"), "advantages_s": float("inf"), "algo_s": float("inf")}
    for _ in range(shape.repeats):
        start = time.perf_counter()
        plan = align(sub_ids, shape.d, rng)
        aligned_rewards = plan.gather(sub_rewards)
        aligned_at = time.perf_counter()
        main_advantages(main_rewards, cfg)
        sub_advantages(aligned_rewards, plan.weight, cfg)
        done = time.perf_counter()
        best["align_s"] = min(best["align_s"], aligned_at - start)
        best["advantages_s"] = min(best["advantages_s"], done - aligned_at)
        best["algo_s"] = min(best["algo_s"], done - start)
    return best


def _time_forward(shape: BenchShape) -> float:
    """Seconds for one no-grad forward of `forward_sequences` sequences of `seq_len` tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.hidden * 8 // 3,
        num_hidden_layers=shape.layers,
        num_attention_heads=max(1, shape.hidden // 64),
        num_key_value_heads=max(1, shape.hidden // 64),
        max_position_embeddings=shape.seq_len,
    )
    model = LlamaForCausalLM(config).eval()
    tokens = torch.randint(0, shape.vocab, (shape.forward_sequences, shape.seq_len))
    with torch.no_grad():
        model(input_ids=tokens[:1, :16])  # warm-up: first call pays one-off allocation costs
        start = time.perf_counter()
        model(input_ids=tokens)
        return time.perf_counter() - start


def run(quick: bool = False) -> dict:
    """Run the benchmark, print a table, return the figures (seconds)."""
    shape = QUICK if quick else FULL
    samples = shape.queries * shape.k * shape.d
    algo = _time_algo(shape)
    forward_measured = _time_forward(shape)
    forward_full = forward_measured * samples / shape.forward_sequences
    result = {
        "queries": shape.queries,
        "k": shape.k,
        "d": shape.d,
        "samples": samples,
        **algo,
        "forward_model": f"Llama {shape.layers} layers, hidden {shape.hidden}, vocab {shape.vocab}",
        "forward_seq_len": shape.seq_len,
        "forward_sequences_measured": shape.forward_sequences,
        "forward_measured_s": forward_measured,
        "forward_all_samples_s": forward_full,
        "forward_over_algo": forward_full / algo["algo_s"],
        "torch_threads": torch.get_num_threads(),
    }
    _print(result)
    return result


def _print(result: dict) -> None:
    samples = f"{result['queries']}·{result['k']}·{result['d']} = {result['samples']}"
    threads = result["torch_threads"]
    table = Table(title=f"M-GRPO algo vs model forward, B·K·D = {samples} sub samples (CPU, {threads} threads)")
    table.add_column("what")
    table.add_column("seconds", justify="right")
    table.add_row("align to D + gather R_S", f"{result['align_s']:.4f}")
    table.add_row("main + sub advantages", f"{result['advantages_s']:.4f}")
    table.add_row("algo total", f"{result['algo_s']:.4f}")
    table.add_row(
        f"forward, {result['forward_sequences_measured']} seq × {result['forward_seq_len']} tok, measured "
        f"({result['forward_model']})",
        f"{result['forward_measured_s']:.4f}",
    )
    table.add_row(
        f"forward, scaled to all {result['samples']} seq (no backward)", f"{result['forward_all_samples_s']:.1f}"
    )
    table.add_row("forward / algo", f"{result['forward_over_algo']:.0f}×")
    Console().print(table)


if __name__ == "__main__":
    run()
