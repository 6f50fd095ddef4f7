"""Weights versions as full snapshots and deltas (mgrpo_actors/weights/delta.py, encoder.py, wire.py): over
several versions of random sparse changes the deltas rebuild the learner's wire weights bit for bit, in fp32
and bf16; each tensor travels as nothing, its changed elements or whole; a full snapshot comes every
full_every versions and first after a restart; a delta is refused on the wrong base or the wrong model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from mgrpo_actors.weights.delta import SparseChange, WeightsDelta, apply_delta, change_of, wire_dtype
from mgrpo_actors.weights.encoder import WeightsEncoder
from mgrpo_actors.weights.wire import read_delta, read_header, write_version

SHAPES = {"embed": (64, 16), "layer.w": (16, 16), "layer.b": (16,), "norm": (16,), "scalar": ()}


def _state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=g) * 0.02 for name, shape in SHAPES.items()}


def _step(state: dict[str, torch.Tensor], g: torch.Generator) -> dict[str, torch.Tensor]:
    """A random sparse change: a few elements of some tensors, all of one, none of others; odd values too."""
    new = {name: t.clone() for name, t in state.items()}
    flat = new["embed"].view(-1)
    flat[torch.randint(0, flat.numel(), (20,), generator=g)] += 1e-3
    new["layer.w"] += torch.randn(16, 16, generator=g) * 1e-2  # every element
    if torch.rand((), generator=g) < 0.5:
        new["norm"][int(torch.randint(0, 16, (), generator=g))] = -0.0  # -0.0 is not 0.0
        new["scalar"] = torch.tensor(float("nan"))
    return new


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    size = {2: torch.int16, 4: torch.int32}[a.element_size()]
    return torch.equal(a.contiguous().view(size), b.contiguous().view(size))


def _rebuild_from_files(paths: list[Path]) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for path in paths:
        header = read_header(path)
        if header.kind == "full":
            state = load_file(str(path))
        else:
            apply_delta(state, read_delta(path, header))
    return state


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_deltas_rebuild_the_wire_weights_bit_for_bit_over_several_versions(tmp_path, dtype):
    encoder = WeightsEncoder(dtype, full_every=100)
    g = torch.Generator().manual_seed(1)
    state, paths, kinds = _state(), [], []
    for version in range(1, 8):
        written = encoder.write(state, version, tmp_path / f"v{version}.safetensors")
        paths.append(written.path)
        kinds.append(read_header(written.path).kind)
        rebuilt = _rebuild_from_files(paths)
        assert set(rebuilt) == set(SHAPES)
        for name, tensor in state.items():
            assert _bits_equal(rebuilt[name], tensor.to(dtype)), (version, name)
            assert _bits_equal(encoder.last[name], tensor.to(dtype)), (version, name)
        state = _step(state, g)
    assert kinds == ["full"] + ["delta"] * 6
    delta = read_delta(paths[3], read_header(paths[3]))
    assert delta.base == 3 and delta.version == 4
    assert "layer.w" in delta.whole and "embed" in delta.sparse and "layer.b" not in delta.shapes()
    assert delta.sparse["embed"].values.dtype == dtype


def test_each_tensor_travels_as_nothing_its_changed_elements_or_whole():
    old = torch.zeros(100)
    assert change_of(old, old.clone()) is None
    few = old.clone()
    few[[3, 70]] = 1.0
    change = change_of(old, few)
    assert isinstance(change, SparseChange) and change.indices.tolist() == [3, 70] and change.values.tolist() == [1, 1]
    many = old + 1.0  # indices and values would cost more than the tensor
    assert change_of(old, many) is many
    signed = old.clone()
    signed[5] = -0.0
    assert isinstance(change_of(old, signed), SparseChange)  # compared by bits


def test_a_full_snapshot_every_full_every_versions_and_first_after_a_restart(tmp_path):
    state = _state()
    encoder = WeightsEncoder(torch.bfloat16, full_every=3)
    bases = [encoder.write(state, v, tmp_path / f"v{v}.safetensors").base for v in range(1, 8)]
    assert bases == [None, 1, 2, None, 4, 5, None]
    restarted = WeightsEncoder(torch.bfloat16, full_every=3)  # a learner restarted or resumed at version 8
    assert restarted.write(state, 8, tmp_path / "v8.safetensors").base is None
    assert restarted.write(state, 9, tmp_path / "v9.safetensors").base == 8
    assert restarted.write(state, 11, tmp_path / "v11.safetensors").base is None  # not the version after 9
    every = WeightsEncoder(torch.float32, full_every=1)
    assert [every.write(state, v, tmp_path / f"e{v}.safetensors").base for v in (1, 2)] == [None, None]


def test_a_full_snapshot_is_a_plain_safetensors_file_of_the_wire_dtype(tmp_path):
    state = _state()
    written = WeightsEncoder(torch.bfloat16, full_every=10, skip={"scalar"}).write(state, 1, tmp_path / "v1.st")
    plain = load_file(str(written.path))
    assert set(plain) == set(SHAPES) - {"scalar"} and all(t.dtype == torch.bfloat16 for t in plain.values())
    assert written.nbytes == written.path.stat().st_size and written.changed == written.elements


def test_a_delta_that_does_not_fit_is_refused_before_anything_changes():
    state = {name: t.to(torch.bfloat16) for name, t in _state().items()}
    before = {name: t.clone() for name, t in state.items()}
    values = torch.ones(2, dtype=torch.bfloat16)
    wrong_shape = WeightsDelta(
        2,
        1,
        "0" * 64,
        {"norm": torch.zeros(3)},
        {"embed": SparseChange((64, 16), torch.tensor([0, 5], dtype=torch.int32), values)},
    )
    with pytest.raises(ValueError, match="wrong shape.*norm"):
        apply_delta(state, wrong_shape)
    unknown = WeightsDelta(
        2, 1, "0" * 64, {}, {"extra": SparseChange((4,), torch.tensor([0, 1], dtype=torch.int32), values)}
    )
    with pytest.raises(ValueError, match="unexpected.*extra"):
        apply_delta(state, unknown)
    assert all(torch.equal(state[n], before[n]) for n in state)
    with pytest.raises(ValueError, match="leave a tensor"):
        SparseChange((4,), torch.tensor([1, 4], dtype=torch.int32), values)
    with pytest.raises(ValueError, match="strictly increasing"):
        SparseChange((4,), torch.tensor([2, 2], dtype=torch.int32), values)


def test_the_wire_dtype_is_bf16_where_the_engine_runs_bf16_else_the_learners():
    assert wire_dtype("bfloat16", "float32") == torch.bfloat16
    assert wire_dtype("float32", "float32") == torch.float32
    assert wire_dtype("float16", "float32") == torch.float32
    assert wire_dtype("float32", "bfloat16") == torch.bfloat16


def test_a_file_that_is_not_a_version_is_refused(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{nope")
    with pytest.raises(ValueError, match="not JSON"):
        read_header(bad)
    encoder = WeightsEncoder(torch.float32, full_every=10)
    encoder.write(_state(), 1, tmp_path / "v1.st")
    written = encoder.write(_step(_state(), torch.Generator().manual_seed(0)), 2, tmp_path / "v2.st")
    header = read_header(written.path)
    assert header.kind == "delta" and header.base == 1 and len(header.base_sha256) == 64


def test_a_delta_whose_indices_do_not_add_up_is_refused(tmp_path):
    encoder = WeightsEncoder(torch.bfloat16, full_every=10)
    state = _state()
    encoder.write(state, 1, tmp_path / "v1.st")
    changed = {name: t.clone() for name, t in state.items()}
    changed["embed"].view(-1)[[1, 2, 3]] += 1.0
    good = read_header(encoder.write(changed, 2, tmp_path / "v2.st").path)
    delta = read_delta(tmp_path / "v2.st", good)
    assert delta.sparse["embed"].indices.tolist() == [1, 2, 3]
    meta = {"mgrpo.kind": "delta", "mgrpo.version": "2", "mgrpo.base": "1", "mgrpo.base_sha256": good.base_sha256}
    meta["mgrpo.shapes"] = '{"embed": [64, 16]}'
    counts, offsets = torch.tensor([4], dtype=torch.int32), torch.tensor([1, 2, 3], dtype=torch.int16)
    values = torch.ones(3, dtype=torch.bfloat16)
    entries = [("embed@counts", counts), ("embed@offsets", offsets), ("embed@values", values)]
    write_version(tmp_path / "bad.st", entries, meta)
    with pytest.raises(ValueError, match="add up to 4, not 3"):
        read_delta(tmp_path / "bad.st", read_header(tmp_path / "bad.st"))
    falling = [("embed@counts", torch.tensor([3], dtype=torch.int32)), ("embed@offsets", offsets.flip(0)), entries[2]]
    write_version(tmp_path / "falling.st", falling, meta)
    with pytest.raises(ValueError, match="do not rise"):
        read_delta(tmp_path / "falling.st", read_header(tmp_path / "falling.st"))
    write_version(tmp_path / "bad2.st", entries[1:], meta)
    with pytest.raises(ValueError, match="needs exactly"):
        read_delta(tmp_path / "bad2.st", read_header(tmp_path / "bad2.st"))


BLOCK = 65_536
LONG = 3 * BLOCK + 5  # four blocks, the last of 5 elements


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sparse_indices_across_block_boundaries_rebuild_bit_for_bit(tmp_path, dtype):
    """A tensor of 3·65,536 + 5 elements changed at both edges of blocks 0, 2 and 3 (block 1 untouched) and
    at its last element, to -0.0, +inf, a NaN with a payload, and ordinary values: the file carries counts
    (2, 0, 2, 3) and uint16 offsets (0, 65535, 0, 65535, 0, 1, 4); the delta rebuilds the tensor bit for bit."""
    from safetensors import safe_open

    ints = {torch.float32: torch.int32, torch.bfloat16: torch.int16}[dtype]
    nan_bits = {torch.float32: 0x7FC00123, torch.bfloat16: 0x7FC3}[dtype]  # a quiet NaN with a payload
    old = {"long": torch.ones(LONG, dtype=dtype), "small": torch.zeros(3, dtype=dtype)}
    encoder = WeightsEncoder(dtype, full_every=100)
    first = encoder.write(old, 1, tmp_path / "v1.st").path
    new = {name: t.clone() for name, t in old.items()}
    at = [0, BLOCK - 1, 2 * BLOCK, 3 * BLOCK - 1, 3 * BLOCK, 3 * BLOCK + 1, LONG - 1]
    new["long"][at] = torch.tensor([-0.0, float("inf"), 2.0, -3.0, 0.5, 0.0, 7.0], dtype=dtype)
    new["long"].view(ints)[3 * BLOCK + 1] = nan_bits  # at[5]
    written = encoder.write(new, 2, tmp_path / "v2.st")
    assert written.base == 1 and written.changed == len(at) and written.tensors == 1
    with safe_open(str(written.path), framework="pt") as f:
        assert sorted(f.keys()) == ["long@counts", "long@offsets", "long@values"]
        assert f.get_tensor("long@counts").tolist() == [2, 0, 2, 3]
        offsets = f.get_tensor("long@offsets").numpy().view(np.uint16).tolist()
        assert offsets == [0, BLOCK - 1, 0, BLOCK - 1, 0, 1, 4]
        assert f.get_tensor("long@values").view(ints).tolist() == new["long"][at].view(ints).tolist()
    delta = read_delta(written.path, read_header(written.path))
    assert delta.sparse["long"].indices.tolist() == at
    rebuilt = _rebuild_from_files([first, written.path])
    assert _bits_equal(rebuilt["long"], new["long"]) and _bits_equal(rebuilt["small"], new["small"])


def test_nan_and_signed_zero_compare_by_bits():
    """Equal bits are no change (NaN unchanged is not a change), other NaN payloads and -0.0 are."""
    old = torch.tensor([float("nan"), 0.0, 1.0] + [0.0] * 997)
    assert change_of(old, old.clone()) is None
    other = old.clone()
    other.view(torch.int32)[0] = 0x7FC00001  # another NaN
    other[1] = -0.0
    change = change_of(old, other)
    assert isinstance(change, SparseChange) and change.indices.tolist() == [0, 1]
    assert change.values.view(torch.int32).tolist() == [0x7FC00001, -(2**31)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sparse_or_whole_by_the_bytes_each_would_take(dtype):
    """Cost rule, by hand: k changed elements of a tensor of N elements (size s bytes each, B blocks of 65,536)
    travel sparse while k·(2 + s) + 4·B + 200 (the header's two extra entries, about) + (2 + s) <= N·s, i.e.
    up to one element short of the break-even, and whole from there on."""
    size = torch.tensor([], dtype=dtype).element_size()
    blocks = -(-LONG // BLOCK)
    last_sparse = (LONG * size - 200 - 4 * blocks) // (2 + size) - 1
    assert (last_sparse + 1) * (2 + size) + 4 * blocks + 200 <= LONG * size
    assert (last_sparse + 2) * (2 + size) + 4 * blocks + 200 > LONG * size
    old = torch.zeros(LONG, dtype=dtype)
    for k, sparse in ((last_sparse, True), (last_sparse + 1, False)):
        new = old.clone()
        new[torch.arange(k) * (LONG // k)] = 1.0  # evenly spaced
        change = change_of(old, new)
        assert isinstance(change, SparseChange) == sparse, (k, type(change))
        if sparse:
            assert change.indices.numel() == k
        else:
            assert change is new
