"""A run's rollouts against this machine's roofline (`mgrpo run --roofline`): every `hf` engine forward of the run
counted (rows, new columns, cached columns, seconds), then the machine's read bandwidth and matmul throughput
measured on every core the process may use (bench/roofline.py), and, per rollout phase, how long the forwards
took against how long the same forwards would take at the roofline.

A forward's roofline time is max(bytes it must read / bandwidth, FLOPs / throughput): the weights once plus every
row's cached and new keys and values (a prefix the cache holds once for its rows, engines/shared_prefix.py, read once,
in float32); 2 FLOPs per weight per new token (the output layer for each row's last
token only) plus attention's 4 · layers · heads · head size per query per attended column (docs/benchmarks.md
§`rollout`: the `hf` engine against plain `generate` and the machine's roofline). A rollout phase is a run of
forwards with no gap of `GAP_S` or more between them (the learners' phase between two steps is such a gap; a
warm-up or pool probe run now shows as phases of its own).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from mgrpo_actors.bench.roofline import dtype_name, machine_peaks, model_shape
from mgrpo_actors.engines import decode

__all__ = ["Forward", "ForwardShape", "counted_forwards", "forward_shape", "phases", "report", "roofline_seconds"]

GAP_S = 5.0  # forwards this far apart belong to different rollout phases


@dataclass(frozen=True)
class ForwardShape:
    """What one forward of a model reads and computes per unit (bench/roofline.py model_shape)."""

    weight_bytes: float
    matmul_params: float  # multiply-adds per new token through every weight
    output_params: float  # of them, the output layer's (computed for each row's last position only)
    kv_bytes_per_token: float  # keys and values of one column of one row, all layers
    prefix_bytes_per_token: float  # the same of a column of a prefix held once (float32 whatever the model's dtype)
    attention_flops: float  # per query per attended column, all layers: 4 · layers · heads · head size
    dtype: str  # the weights' ("bf16", "fp32"): which matmul throughput bounds it


@dataclass(frozen=True)
class Forward:
    shape: ForwardShape
    rows: int
    width: int  # new columns
    cached: int  # columns already in the cache, each row's own
    seconds: float
    started: float
    shared: int = 0  # columns of a prefix the cache holds once (float32) for `sharing` of its rows
    sharing: int = 0


def forward_shape(model: torch.nn.Module) -> ForwardShape:
    base, config = model_shape(model), model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    output = model.get_output_embeddings()
    return ForwardShape(
        weight_bytes=base["weight_bytes"],
        matmul_params=base["matmul_params"],
        output_params=float(output.weight.numel()) if output is not None else 0.0,
        kv_bytes_per_token=base["kv_bytes_per_token"],
        prefix_bytes_per_token=base["kv_bytes_per_token"] * 4 / next(model.parameters()).element_size(),
        attention_flops=4.0 * config.num_hidden_layers * config.num_attention_heads * head_dim,
        dtype=dtype_name(next(model.parameters()).dtype),
    )


def roofline_seconds(forward: Forward, read_gb_s: float, gflop_s: float) -> float:
    """The least time this forward can take on a machine reading `read_gb_s` and computing `gflop_s`."""
    s, rows, width = forward.shape, forward.rows, forward.width
    read = s.weight_bytes + rows * (forward.cached + width) * s.kv_bytes_per_token
    read += forward.shared * s.prefix_bytes_per_token
    flops = 2 * (s.matmul_params - s.output_params) * rows * width + 2 * s.output_params * rows
    flops += s.attention_flops * rows * width * (forward.cached + (width + 1) / 2)  # causal within the block
    flops += s.attention_flops * forward.sharing * width * forward.shared
    return max(read / (read_gb_s * 1e9), flops / (gflop_s * 1e9))


@contextmanager
def counted_forwards() -> Iterator[list[Forward]]:
    """Within it, every forward of the `hf` engine on a CPU is recorded: decode steps and prefill blocks, in
    turn-by-turn decoding (engines/decode.py) and continuous batching (engines/continuous.py) alike. (`hf-generate`
    and `vllm` engines decode elsewhere and are not counted; a forward on another device is left out, its time
    not being a CPU's.)"""
    from mgrpo_actors.engines import continuous

    calls: list[Forward] = []
    shapes: dict[int, ForwardShape] = {}
    original = decode.forward_block

    def counted(model, cache, block, valid):  # noqa: ANN001, ANN202
        if block.device.type != "cpu":
            return original(model, cache, block, valid)
        shape = shapes.get(id(model)) or shapes.setdefault(id(model), forward_shape(model))
        rows, width = block.shape
        view = cache.prefix_view()
        shared = view.prefix.length if view is not None else 0
        sharing = 0 if view is None else rows if view.rows is None else len(view.rows)
        cached, start = cache.length, time.perf_counter()
        logits = original(model, cache, block, valid)
        calls.append(Forward(shape, rows, width, cached, time.perf_counter() - start, start, shared, sharing))
        return logits

    decode.forward_block = continuous.forward_block = counted  # both call it by these module names
    try:
        yield calls
    finally:
        decode.forward_block = continuous.forward_block = original


def phases(calls: Sequence[Forward], gap_s: float = GAP_S) -> list[list[Forward]]:
    """The forwards split where `gap_s` or more passed between one's end and the next one's start."""
    groups: list[list[Forward]] = []
    for call in sorted(calls, key=lambda c: c.started):
        last = groups[-1][-1] if groups else None
        if last is None or call.started - (last.started + last.seconds) >= gap_s:
            groups.append([call])
        else:
            groups[-1].append(call)
    return groups


def report(calls: Sequence[Forward], say: Callable[[str], None]) -> None:
    """Measure the machine's peaks on every core the process may use (a run leaves torch at 1 thread; its compute
    used them all), then say, per rollout phase, its forwards' time against the roofline's. The forwards are
    the engine's as it shapes them: a block's padding and the cache's holes count as work."""
    if not calls:
        say("no forward of an hf engine on a CPU was counted: nothing to set against the roofline")
        return
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    peaks = machine_peaks([torch.bfloat16, torch.float32])
    say(
        f"machine: read {peaks['read_gb_s']:.1f} GB/s, matmul bf16 {peaks['matmul_gflop_s_bf16']:.0f} / fp32 "
        f"{peaks['matmul_gflop_s_fp32']:.0f} GFLOP/s (torch threads {torch.get_num_threads()})"
    )
    for n, group in enumerate(phases(calls)):
        wall = group[-1].started + group[-1].seconds - group[0].started
        spent = sum(c.seconds for c in group)
        decodes = [c for c in group if c.width == 1]
        roof = sum(
            roofline_seconds(
                c, peaks["read_gb_s"], peaks.get(f"matmul_gflop_s_{c.shape.dtype}", peaks["matmul_gflop_s_fp32"])
            )
            for c in group
        )
        mean_rows = sum(c.rows for c in decodes) / max(1, len(decodes))
        mean_cached = sum(c.cached for c in decodes) / max(1, len(decodes))
        mean_shared = sum(c.shared for c in decodes) / max(1, len(decodes))
        say(
            f"rollout phase {n}: {len(group)} forwards ({len(decodes)} decode steps of {mean_rows:.1f} rows over "
            f"{mean_cached:.0f} cached columns each and {mean_shared:.0f} shared), "
            f"{sum(c.rows * c.width for c in group):,} tokens fed; "
            f"first to last {wall:.1f} s, in forwards {spent:.1f} s, at the roofline {roof:.2f} s "
            f"({roof / spent:.0%} of the forwards' time)"
        )
