"""bench/run_roofline.py: a forward's roofline time worked by hand; every engine forward counted (prefill blocks
and decode steps, their rows and cached columns) and the engine left as it was; forwards split into phases at
gaps."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mgrpo_actors.bench.run_roofline import (
    Forward,
    ForwardShape,
    counted_forwards,
    forward_shape,
    phases,
    report,
    roofline_seconds,
)
from mgrpo_actors.engines import SamplingParams
from mgrpo_actors.engines import continuous as continuous_module
from mgrpo_actors.engines import decode as decode_module
from mgrpo_actors.engines import kv_cache as kv_cache_module
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.models.loader import load_model

SHAPE = ForwardShape(
    weight_bytes=1000,
    matmul_params=100,
    output_params=10,
    kv_bytes_per_token=8,
    prefix_bytes_per_token=8,
    attention_flops=4,
    dtype="fp32",
)


def test_a_forwards_roofline_worked_by_hand():
    forward = Forward(SHAPE, rows=2, width=3, cached=5, seconds=9.0, started=0.0)
    # read: 1000 + 2 rows x (5 + 3) columns x 8 = 1128 bytes; compute: 2 x 90 x 2 x 3 (all new tokens) + 2 x 10 x 2
    # (the output layer, last tokens) + 4 x 2 x 3 x (5 + 2) (attention: cached plus, causally, (3 + 1) / 2) = 1288
    assert roofline_seconds(forward, read_gb_s=1e-6, gflop_s=1e-6) == pytest.approx(1.288)  # 1,000 B or FLOP a second
    assert roofline_seconds(forward, read_gb_s=1e-6, gflop_s=1.0) == pytest.approx(1.128)  # bound by reading


def test_a_prefix_held_once_is_read_once_and_attended_by_the_rows_that_hold_it():
    forward = Forward(SHAPE, rows=2, width=3, cached=5, seconds=9.0, started=0.0, shared=10, sharing=1)
    # read: 1128 as above + 10 prefix columns x 8 once (fp32: the engine's own dtype) = 1208; compute: 1288 as above
    # + 4 x 1 holding row x 3 new columns x 10 prefix columns = 1408
    assert roofline_seconds(forward, read_gb_s=1e-6, gflop_s=1e-6) == pytest.approx(1.408)
    assert roofline_seconds(forward, read_gb_s=1e-6, gflop_s=1.0) == pytest.approx(1.208)
    bf16 = Forward(dataclasses.replace(SHAPE, dtype="bf16", prefix_bytes_per_token=16), 2, 3, 5, 9.0, 0.0, 10, 2)
    assert roofline_seconds(bf16, read_gb_s=1e-6, gflop_s=1.0) == pytest.approx(1.288)  # a bf16 prefix held in fp32


def test_a_prefix_column_is_counted_in_float32_whatever_the_models_dtype():
    model, _ = load_model("tiny:main")
    fp32 = forward_shape(model)
    assert fp32.prefix_bytes_per_token == fp32.kv_bytes_per_token
    bf16 = forward_shape(model.to(torch.bfloat16))
    assert bf16.prefix_bytes_per_token == 2 * bf16.kv_bytes_per_token == fp32.prefix_bytes_per_token


def test_a_run_without_counted_forwards_says_so():
    said: list[str] = []
    report([], said.append)
    assert said == ["no forward of an hf engine on a CPU was counted: nothing to set against the roofline"]


def test_phases_split_at_gaps():
    calls = [Forward(SHAPE, 1, 1, 0, 0.5, t) for t in (0.0, 1.0, 2.0, 10.0, 10.6)]
    assert [len(group) for group in phases(calls, gap_s=5.0)] == [3, 2]


def test_every_engine_forward_is_counted_and_the_engine_restored():
    model, tokenizer = load_model("tiny:main")
    engine = HFEngine(model, tokenizer)
    prompts = [list(tokenizer(f"question {i}: which city?", add_special_tokens=False)["input_ids"]) for i in range(3)]
    original = decode_module.forward_block
    with counted_forwards() as calls:
        assert continuous_module.forward_block is decode_module.forward_block is not original  # both paths counted
        engine.generate(prompts, SamplingParams(max_new_tokens=4, temperature=1.0, seed=0))
    assert decode_module.forward_block is original and continuous_module.forward_block is original
    assert calls and calls[0].width > 1  # the prompts' prefill first
    steps = [c for c in calls if c.width == 1]
    assert 1 <= len(steps) <= 4 and all(c.rows <= 3 and c.cached > 0 and c.shared == 0 for c in steps)
    assert calls[0].shape.weight_bytes > 0 and all(c.seconds > 0 for c in calls)


def test_a_prefix_the_rows_share_is_counted_once(monkeypatch):
    monkeypatch.setattr(kv_cache_module, "MIN_SHARED_READS", 64)  # the tiny model's 3 short rows hold it once too
    model, tokenizer = load_model("tiny:main")
    opening = list(tokenizer("You are the main agent; answer from the pages you read. " * 8)["input_ids"])
    prompts = [opening + list(tokenizer(f"question {i}: which city?")["input_ids"]) for i in range(3)]
    with counted_forwards() as calls:
        HFEngine(model, tokenizer).generate(prompts, SamplingParams(max_new_tokens=4, temperature=1.0, seed=0))
    steps = [c for c in calls if c.width == 1]
    assert steps and all(c.shared >= len(opening) and c.sharing == c.rows == 3 for c in steps)
    assert all(c.cached < 20 for c in steps)  # each row's own columns: its question, not the opening again
