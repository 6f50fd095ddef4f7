"""The roofline of `mgrpo bench rollout`: what this machine can do, measured in the run (never assumed), and
the decode bound of a model on it.

Memory read bandwidth: torch.sum over a large fp32 tensor; matmul throughput: an n×n matmul at each dtype;
each the best of several runs at the current torch thread count. A decode step at batch B reads every
weight once (the input embedding only for B rows, unless it is tied to the output layer) and B rows of
cached keys and values, and does 2·params·B flops: tokens/s ≤ B / max(bytes / bandwidth, 2·params·B /
throughput). bf16 counts only where the CPU has bf16 instructions (avx512_bf16 or amx_bf16).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

__all__ = ["bf16_capable", "dtype_name", "machine_peaks", "model_shape", "roofline_tokens_per_s"]


def bf16_capable() -> tuple[bool, str]:
    """(whether the CPU has bf16 instructions, what says so)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        flags = set()
    found = sorted(flags & {"avx512_bf16", "amx_bf16"})
    capability = torch.backends.cpu.get_cpu_capability()
    if found:
        return True, f"cpu flags {', '.join(found)}; torch CPU capability {capability}"
    return False, f"no avx512_bf16/amx_bf16 cpu flag; torch CPU capability {capability}"


def _best_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: first-touch pages, kernel selection
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def machine_peaks(dtypes: Sequence[torch.dtype], read_mb: int = 512, matmul_n: int = 2048) -> dict[str, float]:
    """Measured now, at the current torch thread count: read bandwidth (GB/s: torch.sum over `read_mb` MB
    of fp32) and matmul throughput per dtype (GFLOP/s of an n×n matmul), each the best of several runs."""
    data = torch.ones(read_mb * 2**20 // 4, dtype=torch.float32)
    peaks = {"read_gb_s": data.numel() * 4 / _best_seconds(data.sum, 7) / 1e9}
    del data
    for dtype in dtypes:
        a = torch.randn(matmul_n, matmul_n).to(dtype)
        b = torch.randn(matmul_n, matmul_n).to(dtype)
        seconds = _best_seconds(lambda a=a, b=b: a @ b, 5)
        peaks[f"matmul_gflop_s_{dtype_name(dtype)}"] = 2 * matmul_n**3 / seconds / 1e9
    return peaks


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(dtype, str(dtype).removeprefix("torch."))


def model_shape(model: torch.nn.Module) -> dict[str, float]:
    """What a decode step reads and computes: "weight_bytes" (every weight, the input embedding left out
    unless it is the output layer too), "matmul_params" (the same weights, counted as multiply-adds
    per token), "kv_bytes_per_token" (keys and values of one cached column of one row, all layers)."""
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    tied = output is not None and output.weight.data_ptr() == embedding.data_ptr()
    unique = {p.data_ptr(): p for p in model.parameters()}.values()
    read = [p for p in unique if tied or p.data_ptr() != embedding.data_ptr()]
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    itemsize = embedding.element_size()
    return {
        "weight_bytes": float(sum(p.numel() * p.element_size() for p in read)),
        "matmul_params": float(sum(p.numel() for p in read)),
        "kv_bytes_per_token": float(2 * config.num_hidden_layers * kv_heads * head_dim * itemsize),
        "params": float(sum(p.numel() for p in unique)),
    }


def roofline_tokens_per_s(
    shape: dict[str, float], batch: int, context: float, read_gb_s: float, gflop_s: float
) -> dict[str, float]:
    """The decode bound at `batch` rows of mean `context` cached columns: tokens/s and which side binds."""
    memory_s = (shape["weight_bytes"] + batch * context * shape["kv_bytes_per_token"]) / (read_gb_s * 1e9)
    compute_s = 2 * shape["matmul_params"] * batch / (gflop_s * 1e9)
    return {
        "tokens_per_s": batch / max(memory_s, compute_s),
        "memory_s": memory_s,
        "compute_s": compute_s,
        "bound": "memory" if memory_s >= compute_s else "compute",
    }
