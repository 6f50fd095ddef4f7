"""The rollout benchmark: its token accounting is the engine's, and its quick run's figures are consistent.

The `hf` engine and plain `generate` sample different continuations (per-row streams against one global
stream), so the bench compares rates, with tokens counted by one rule on both sides. That rule is
checked here against the engine's own trimming, on a sampler both share (`hf-generate`, which samples
exactly what plain generate samples from the same seed)."""

import pytest
import torch

from mgrpo_actors.bench import rollout
from mgrpo_actors.bench.roofline import roofline_tokens_per_s
from mgrpo_actors.engines.base import SamplingParams
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.models.loader import load_model


def test_plain_generate_is_counted_by_the_engines_trimming_rule():
    model, tokenizer = load_model("tiny:main")
    engine = HFEngine(model, tokenizer, use_generate=True)  # transformers' generate, the engine's trimming
    prompts = rollout._prompts(tokenizer, 8)
    params = SamplingParams(temperature=1.0, top_k=50, top_p=0.95, max_new_tokens=24, seed=3)
    trimmed = [g.token_ids for g in engine.generate(prompts, params)]
    counted = rollout._plain_generate(model, engine.pad_token_id, engine.eos_token_ids, prompts, params)
    assert counted == trimmed  # same sampler and seed: the same ids, cut at the same place
    assert any(len(row) < params.max_new_tokens for row in trimmed)  # some rows stopped: the cut was exercised
    width = max(map(len, trimmed))
    padded = torch.tensor([row + [engine.pad_token_id] * (width - len(row)) for row in trimmed])
    assert rollout.counted_tokens(padded, engine.eos_token_ids) == sum(map(len, trimmed))


def test_roofline_is_the_tighter_of_memory_and_compute():
    shape = {"weight_bytes": 1e9, "matmul_params": 5e8, "kv_bytes_per_token": 1e4, "params": 5e8}
    memory = roofline_tokens_per_s(shape, batch=1, context=100, read_gb_s=10.0, gflop_s=1000.0)
    assert memory["bound"] == "memory" and memory["tokens_per_s"] == pytest.approx(1 / ((1e9 + 1e6) / 1e10))
    compute = roofline_tokens_per_s(shape, batch=64, context=100, read_gb_s=10.0, gflop_s=100.0)
    assert compute["bound"] == "compute" and compute["tokens_per_s"] == pytest.approx(64 / (2 * 5e8 * 64 / 1e11))


def test_quick_rollout_bench_reports_consistent_figures():
    result = rollout.run(quick=True)
    cfg = rollout.QUICK
    assert result["model"] == "tiny:main"
    assert result["peaks"]["read_gb_s"] > 0 and result["peaks"]["matmul_gflop_s_fp32"] > 0
    assert result["dtypes"][0] == "fp32"
    assert {(row["dtype"], row["batch"]) for row in result["batches"]} == {
        (d, b) for d in result["dtypes"] for b in cfg.batch_sizes
    }
    for row in result["batches"]:
        budget = row["repeats"] * row["batch"] * cfg.max_new_tokens
        for side in ("hf", "generate"):  # like with like: both within the same budget, counted the same way
            assert 0 < row[f"{side}_tokens"] <= budget
            assert row[f"{side}_tokens_per_s"] > 0
        assert row["ratio"] > 0 and row["roofline_tokens_per_s"] > 0
        assert row["roofline_fraction"] == pytest.approx(row["hf_tokens_per_s"] / row["roofline_tokens_per_s"])
    turns = result["multi_turn"]
    budget = turns["repeats"] * turns["batch"] * turns["turns"] * turns["turn_tokens"]
    assert 0 < turns["hf_tokens"] <= budget and 0 < turns["generate_tokens"] <= budget
    for side in ("hf", "generate"):  # the history grew by the tool messages on both sides
        assert turns["final_context"][side] > (turns["turns"] - 1) * turns["tool_tokens"] * 0.8
    assert result["target_speedup"] == rollout.TARGET_SPEEDUP and result["target_roofline"] == rollout.TARGET_ROOFLINE
