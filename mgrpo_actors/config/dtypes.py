"""`dtype: auto` for an agent's engine and a learner: bf16 where this host computes it natively, fp32 elsewhere.

Measured on a 2-core Xeon with AMX-BF16 (`make run`'s SmolLM2 step, same seed, docs/benchmarks.md): bf16 engines
took the rollouts from 48.0 s... to 42.5 s beside bf16 learners, and bf16 learners the learning from 53.8 to 29.7 s;
on a CPU without bf16 instructions torch emulates bf16 and gains nothing, so there `auto` stays fp32. A config is
resolved where it is loaded, so every host picks for its own CPU or GPU.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["AUTO", "host_has_bf16", "resolve_dtype"]

AUTO = "auto"
# /proc/cpuinfo flags of CPUs with bf16 matrix instructions: Intel AMX, and AVX512-BF16 (Intel, AMD EPYC).
_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


@cache
def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: no flags known, so no bf16 assumed
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def host_has_bf16(device: str) -> bool:
    """Whether `device` ("cpu", "cuda", "cuda:1") computes bf16 natively on this host."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return bool(_BF16_FLAGS & _cpu_flags())


def resolve_dtype(dtype: str, device: str) -> str:
    """`dtype` itself, or for "auto" "bfloat16" where `device` computes bf16 natively and "float32" elsewhere."""
    if dtype != AUTO:
        return dtype
    return "bfloat16" if host_has_bf16(device) else "float32"
