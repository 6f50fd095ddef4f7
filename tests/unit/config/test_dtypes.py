"""`dtype: auto` (config/dtypes.py): bf16 exactly where the host's CPU flags (or GPU) compute it natively, fp32
elsewhere; resolved when the config loads; an explicit dtype is kept."""

from __future__ import annotations

import pytest

from mgrpo_actors.config import NodeConfig, dtypes, load_config


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"avx512f", "amx_bf16", "amx_tile"}, "bfloat16"),  # Intel Xeon with AMX
        ({"avx512f", "avx512_bf16"}, "bfloat16"),  # AMD EPYC (Zen 4): AVX512-BF16 only
        ({"avx512f", "avx2"}, "float32"),  # no bf16 instructions: torch would emulate it
        (set(), "float32"),  # flags unknown (not Linux)
    ],
)
def test_auto_follows_the_cpu_flags(monkeypatch, flags, expected):
    monkeypatch.setattr(dtypes, "_cpu_flags", lambda: frozenset(flags))
    assert dtypes.resolve_dtype("auto", "cpu") == expected
    config = load_config(NodeConfig, None, ["agents.main.dtype=auto", "learners.main.dtype=auto"])
    assert (config.agents.main.dtype, config.learners.main.dtype) == (expected, expected)
    assert config.agents.sub.dtype == "float32" and dtypes.resolve_dtype("float16", "cpu") == "float16"


def test_this_hosts_flags_are_read_from_proc_cpuinfo():
    flags = dtypes._cpu_flags()
    assert isinstance(flags, frozenset)
    try:
        text = open("/proc/cpuinfo").read()  # noqa: SIM115, PTH123
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    assert ("avx512_bf16" in text.split() or "amx_bf16" in text.split()) == dtypes.host_has_bf16("cpu")
