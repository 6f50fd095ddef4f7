"""The GPU install set (deploy/gpu/requirements.txt): in step with pyproject.toml, and resolvable by pip.

The resolution is pip's own (`pip install --dry-run --ignore-installed --report`), against the package index
alone (no local wheels or config files: what a GPU host sees), for this machine's platform (Linux x86_64,
CPython 3.11, the GPU hosts'). It reads metadata only: pip 26.3 with `fast-deps` reads each wheel's metadata
by HTTP range requests (about 90 MB in all here, where the index serves no separate metadata files), while
pip 23.2 (the venv's) downloads every wheel of a dry run, about 4 GB for this set. So the test runs pip 26.3
from its wheel (cached under ~/.cache/mgrpo-actors/tools). Measured: 145-165 s on this 2-core machine (about
200 packages, a few requests each), which `make test` (CI) has no room for, and it needs the package index: so
the resolution runs only with MGRPO_TEST_GPU_RESOLVE=1 (`make test-gpu-resolve`, which `make test-vllm` runs
too) and skips, saying so, otherwise. It also skips when the index cannot be reached or pip has not finished in
RESOLVE_TIMEOUT_S. The two checks of the files against pyproject.toml need neither and always run.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
GPU_SET = REPO / "deploy" / "gpu" / "requirements.txt"
PROJECT_DEPS = REPO / "deploy" / "gpu" / "project-deps.txt"
VLLM_TEST_DEPS = REPO / "tests" / "vllm" / "requirements.txt"
PIP_VERSION = "26.3"
RESOLVE_TIMEOUT_S = 420
RESOLVE_SWITCH = "MGRPO_TEST_GPU_RESOLVE"  # =1: run the resolution (opt-in, see above)
# Pinned by the GPU set itself, apart from the CPU install's pins (vLLM 0.32.0 needs transformers < 5.20, numba 0.65
# needs numpy < 2.4).
OWN_PINS = {"torch", "transformers", "tokenizers", "numpy", "numba"}
_UNREACHABLE = re.compile(
    r"NewConnectionError|Max retries exceeded|Name or service not known|Temporary failure in name resolution|"
    r"Network is unreachable|Connection refused|Read timed out|ConnectTimeout|No route to host",
    re.IGNORECASE,
)


def _name(requirement: str) -> str:
    return re.split(r"[=<>!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _pins(path: Path) -> dict[str, str]:
    """name -> version of a requirements file's `name==version` lines (comments and -r lines left out)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            name, _, version = line.partition("==")
            pins[_name(name)] = version
    return pins


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_the_gpu_set_names_every_runtime_dependency_with_the_projects_pins_but_its_own():
    runtime = {_name(r): r.split("==", 1)[1] for r in _pyproject()["dependencies"]}
    project = _pins(PROJECT_DEPS)
    assert set(project) == set(runtime) - OWN_PINS
    assert {name: version for name, version in project.items() if runtime[name] != version} == {}
    gpu = _pins(GPU_SET)
    assert set(gpu) == OWN_PINS | {"vllm"} and gpu["torch"] == runtime["torch"]
    assert "-r project-deps.txt" in GPU_SET.read_text()


def test_the_cpu_vllm_venv_gets_the_projects_test_pins():
    dev = {_name(r): r.split("==", 1)[1] for r in _pyproject()["optional-dependencies"]["dev"]}
    tests = _pins(VLLM_TEST_DEPS)
    assert tests == {name: version for name, version in dev.items() if name != "ruff"}
    assert "-r ../../deploy/gpu/project-deps.txt" in VLLM_TEST_DEPS.read_text()


def _index_env() -> dict[str, str]:
    """This environment without pip's config files and local wheel sources: the index alone decides."""
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_NO_INDEX")}
    env.pop("PIP_EXTRA_INDEX_URL", None)
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def _pip_wheel() -> Path:
    """pip PIP_VERSION's wheel (run as `python pip.whl/pip`), downloaded once; skips when the index is out of reach."""
    cache = Path.home() / ".cache" / "mgrpo-actors" / "tools"
    wheel = cache / f"pip-{PIP_VERSION}-py3-none-any.whl"
    if not wheel.exists():
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--timeout", "15"]
        command += ["--retries", "1", "-c", str(REPO / "constraints.txt"), "-d", str(cache), f"pip=={PIP_VERSION}"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=_index_env())
        if done.returncode != 0 or not wheel.exists():
            pytest.skip(f"the package index cannot be reached (pip download pip=={PIP_VERSION}): {done.stderr[-300:]}")
    return wheel


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get(RESOLVE_SWITCH) != "1",
    reason=f"resolving the GPU set takes about 150 s and the package index: opt in with {RESOLVE_SWITCH}=1 "
    "(`make test-gpu-resolve`)",
)
@pytest.mark.timeout(RESOLVE_TIMEOUT_S + 180)
def test_pip_resolves_the_gpu_set(tmp_path):
    if not (sys.platform == "linux" and platform.machine() == "x86_64"):
        pytest.skip("the set is for Linux x86_64 GPU hosts; pip resolves for the machine it runs on")
    report = tmp_path / "report.json"
    command = [sys.executable, str(_pip_wheel() / "pip"), "install", "--dry-run", "--ignore-installed", "--quiet"]
    command += ["--disable-pip-version-check", "--timeout", "30", "--retries", "2", "--use-feature=fast-deps"]
    # wheels only (no sdist built to read its metadata), but deepspeed, which has none
    command += ["--only-binary=:all:", "--no-binary=deepspeed", "--report", str(report), "-r", str(GPU_SET)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S, env=_index_env(), cwd=tmp_path
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip did not finish resolving in {RESOLVE_TIMEOUT_S} s (a slow index)")
    if done.returncode != 0 and _UNREACHABLE.search(done.stderr):
        pytest.skip(f"the package index cannot be reached: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    installed = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert {name: installed.get(name) for name in ("vllm", "torch", "transformers", "numpy")} == {
        "vllm": "0.32.0",
        "torch": "2.13.0",  # the index's CUDA build, no local +cpu wheel
        "transformers": "5.19.0",
        "numpy": "2.3.5",
    }
    assert installed["deepspeed"] == "0.19.8" and "flashinfer-python" in installed
