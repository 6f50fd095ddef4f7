"""deploy/gpu/hf_cuda.py, the GPU check's section that needs no vLLM, run on the CPU (`--device cpu`): its figures
are one JSON line each, the fp32 engine and learner agree on every sampled token, a learner step's delta
reaches the engine bit for bit, and its throughput section runs (the check of the script itself; the GPU
figures are in docs/deployment.md §GPU hosts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]


def test_the_gpu_script_runs_on_the_cpu_with_exact_fp32_logprobs_and_weights():
    command = [sys.executable, str(REPO / "deploy" / "gpu" / "hf_cuda.py"), "--device", "cpu"]
    command += ["--batches", "2", "--max-new-tokens", "4", "--repeats", "1"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"section"')]
    by_section: dict[str, list[dict]] = {}
    for figure in figures:
        by_section.setdefault(figure["section"], []).append(figure)
    gaps = {f["dtype"]: f for f in by_section["gap"]}
    steps = {f["dtype"]: f for f in by_section["step"]}
    assert set(gaps) == set(steps) == {"float32", "bfloat16"}
    fp32 = gaps["float32"]
    assert fp32["tokens"] > 50 and fp32["outside_learner_nucleus"] == 0
    assert fp32["max_abs"] < 1e-4  # the engine's behaviour logprobs are the learner's, to fp32 rounding
    assert steps["float32"]["tensors_changed"] > 0
    assert steps["float32"]["gap_after_max_abs"] < 1e-4  # the new version reached the engine
    assert all(step["engine_bit_exact"] for step in steps.values())
    (throughput,) = by_section["throughput"]
    assert throughput["batch"] == 2 and throughput["hf_tokens_per_s"] > 0 and throughput["generate_tokens_per_s"] > 0
