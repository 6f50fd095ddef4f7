"""Shared fixtures: a real nats-server (the venv's, via EmbeddedNats) on a random loopback port, a
connected Bus per test, a unique run id per test, and paths to the venv's console scripts.

No mock of NATS anywhere (docs/architecture.md §Tests). Hypothesis runs derandomized (fixed seeds) so every run
of the suite draws the same examples. tests/vllm/ is collected only under `make test-vllm` (MGRPO_TEST_VLLM=1).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import venv_script

settings.register_profile(
    "mgrpo",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("mgrpo")

# tests/vllm/ needs vLLM (its CPU build, in a venv of its own: `make test-vllm`); the main run never collects it.
collect_ignore = [] if os.environ.get("MGRPO_TEST_VLLM") else ["vllm"]


@pytest.fixture
def venv_bin() -> Callable[[str], Path]:
    """`venv_bin("mgrpo-node")` -> path of that console script."""
    return venv_script


@pytest.fixture(scope="module")
def nats_server() -> Iterator[EmbeddedNats]:  # noqa: F821
    """One real nats-server (JetStream on, temporary store) per test module; tests isolate by run id."""
    from mgrpo_actors.runtime import EmbeddedNats

    server = EmbeddedNats().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def run_id() -> str:
    """A run id unique to this test (a valid subject token and stream-name part)."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_bus(nats_server, run_id) -> Iterator[Callable[..., Bus]]:  # noqa: F821
    """Factory of extra connected buses on the test's server and run; all closed after the test."""
    from mgrpo_actors.runtime import Bus

    buses = []

    def make(node: str = "", **kwargs) -> Bus:
        b = Bus(
            nats_server.url, run_id=kwargs.pop("run_id", run_id), node=node or f"test-{len(buses)}", **kwargs
        ).connect()
        buses.append(b)
        return b

    try:
        yield make
    finally:
        for b in reversed(buses):
            b.close()


@pytest.fixture
def bus(make_bus):
    """A connected Bus for this test's run id, closed after the test."""
    return make_bus("test")


@pytest.fixture
def actors(make_bus) -> Iterator[list]:
    """Append pykka ActorRefs started by a test; they are stopped after it (before its buses close,
    which is why this fixture depends on make_bus)."""
    refs: list = []
    try:
        yield refs
    finally:
        for ref in reversed(refs):
            try:
                ref.stop(timeout=10)
            except Exception:
                pass


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and on a shared 2-core machine spinning OpenMP threads make them
    ~10x slower: one torch thread for the module (`pytestmark = pytest.mark.usefixtures("one_torch_thread")`)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
