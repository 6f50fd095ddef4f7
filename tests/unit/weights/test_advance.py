"""The delta's compiled loops (mgrpo_actors/weights/kernels.py) and the encoder's in-place advance
(mgrpo_actors/weights/advance.py) against plain numpy and torch: the same changed elements, found by their
bits, in order; the held weights equal to the new ones cast by torch, bit for bit (NaN, -0.0, subnormals,
0-d tensors, another dtype); whole once the changes cost more than the tensor; the same results whichever
thread computed them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mgrpo_actors.weights.advance import advance, advance_all, compiled_cast_matches_torch
from mgrpo_actors.weights.delta import SparseChange, change_of, set_elements, whole_at
from mgrpo_actors.weights.kernels import cast_to_bf16, changed_elements, scatter_elements


def _bits(t: torch.Tensor) -> np.ndarray:
    kind = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().contiguous().view(kind).reshape(-1).numpy()


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1003])
def test_changed_elements_are_numpys_in_order_and_update_the_old(dtype, n):
    rng = np.random.default_rng(n)
    old = rng.integers(-100, 100, n).astype(dtype)
    new = old.copy()
    new[rng.random(n) < 0.2] += 1
    expected = np.flatnonzero(new != old)
    indices, values = np.empty(n + 9, np.int32), np.empty(n + 9, dtype)
    count, compared = changed_elements(new, old.copy(), 5, indices, values, 0, n + 1, update=False)
    assert (count, compared) == (expected.size, n)
    assert indices[:count].tolist() == (expected + 5).tolist() and values[:count].tolist() == new[expected].tolist()
    updated = old.copy()
    changed_elements(new, updated, 0, indices, values, 0, n + 1, update=True)
    assert np.array_equal(updated, new)


def test_changed_elements_stop_at_the_limit_and_say_how_far_they_compared():
    old = np.zeros(40, np.int16)
    new = old.copy()
    new[[1, 2, 3, 17, 30]] = 1
    indices, values = np.empty(11, np.int32), np.empty(11, np.int16)
    count, compared = changed_elements(new, old, 0, indices, values, 0, 3, update=True)
    assert count == 3 and indices[:3].tolist() == [1, 2, 3] and compared == 4  # stopped after the word of 1-3
    assert old[:4].tolist() == [0, 1, 1, 1] and old[17] == 0  # nothing past what it compared was written
    with pytest.raises(ValueError, match="room"):
        changed_elements(new, old, 0, indices, values, 0, 10, update=False)


def test_scatter_writes_in_place_and_refuses_an_index_outside():
    target = np.zeros(10, np.int16)
    scatter_elements(target, np.array([0, 9], np.int32), np.array([5, -3], np.int16))
    assert target.tolist() == [5] + [0] * 8 + [-3]
    with pytest.raises(IndexError):
        scatter_elements(target, np.array([10], np.int32), np.array([1], np.int16))


def test_the_compiled_cast_gives_torchs_bits_and_hands_nan_back():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, 100_000, dtype=np.uint32)
    bits[:6] = [0x00000001, 0x80000000, 0x7F7FFFFF, 0x3F808000, 0x3F818000, 0x007FFFFF]  # subnormal, -0, ties
    bits = bits[(bits & 0x7FFFFFFF) <= 0x7F800000]
    ours = np.empty(bits.size, np.uint16)
    assert cast_to_bf16(bits, ours)
    theirs = torch.from_numpy(bits.view(np.float32)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(ours, theirs) == compiled_cast_matches_torch()
    assert not cast_to_bf16(np.array([0x7FC00000], np.uint32), np.empty(1, np.uint16))


# fp32 bits -> bf16 bits, rounded to nearest, ties to even, worked by hand: ties at both parities and signs, just
# off a tie, rounding up to infinity, subnormal ties, the largest subnormal rounding to the smallest normal
ROUNDED = {
    0x3F808000: 0x3F80,
    0x3F818000: 0x3F82,
    0xBF808000: 0xBF80,
    0xBF818000: 0xBF82,
    0x3F808001: 0x3F81,
    0x3F807FFF: 0x3F80,
    0x7F7FFFFF: 0x7F80,
    0x7F7F8000: 0x7F80,
    0xFF7F8000: 0xFF80,
    0x7F7F7FFF: 0x7F7F,
    0x00000001: 0x0000,
    0x00008000: 0x0000,
    0x00018000: 0x0002,
    0x80018000: 0x8002,
    0x007FFFFF: 0x0080,
    0x80000000: 0x8000,
    0x7F800000: 0x7F80,
    0xFF800000: 0xFF80,
}


def test_the_compiled_cast_rounds_to_nearest_even_as_worked_by_hand_and_as_torch_does():
    bits = np.array(list(ROUNDED), np.uint32)
    ours = np.empty(bits.size, np.uint16)
    assert cast_to_bf16(bits, ours)
    assert [hex(b) for b in ours] == [hex(b) for b in ROUNDED.values()]
    theirs = torch.from_numpy(bits.view(np.float32)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    if compiled_cast_matches_torch():  # where torch casts otherwise (say, flushing subnormals), torch casts
        assert np.array_equal(ours, theirs)


def test_a_nan_past_an_early_whole_stop_gets_the_bits_of_torchs_whole_cast():
    for dtype in (torch.float32, torch.float64):
        n = (1 << 19) + 77
        source = torch.randn(n, generator=torch.Generator().manual_seed(5), dtype=dtype)
        held = (source + 1.0).to(torch.bfloat16)  # every element differs: whole from the first chunk on
        source[-1] = float("nan")
        source[(1 << 18) + 3] = float("nan")
        assert advance(held, source) is held
        assert np.array_equal(_bits(held), _bits(source.to(torch.bfloat16)))


def _odd_values(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(n, generator=g) * 0.02
    t[: min(n, 4)] = torch.tensor([float("nan"), -0.0, 1e-40, float("inf")])[: min(n, 4)]
    return t


@pytest.mark.parametrize("wire", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [1, 5, 1000, (1 << 18) + 13])
@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.3, 1.0])
def test_advance_makes_the_held_weights_torchs_cast_and_returns_what_change_of_finds(wire, n, fraction):
    before = _odd_values(n, 0)
    after = before.clone()
    moved = torch.rand(n, generator=torch.Generator().manual_seed(1)) < fraction
    after[moved] += 0.01
    held = before.to(wire)
    expected = change_of(held.clone(), after.to(wire))
    change = advance(held, after)
    assert np.array_equal(_bits(held), _bits(after.to(wire)))
    if expected is None:
        assert change is None
    elif isinstance(expected, SparseChange):
        assert isinstance(change, SparseChange)
        assert torch.equal(change.indices, expected.indices) and np.array_equal(
            _bits(change.values), _bits(expected.values)
        )
    else:
        assert change is held


def test_advance_casts_a_0d_nan_as_torch_does_and_other_dtypes_and_layouts():
    held = torch.tensor(0.5).to(torch.bfloat16)
    assert advance(held, torch.tensor(float("nan"))) is held  # one element: whole
    assert np.array_equal(_bits(held), _bits(torch.tensor(float("nan")).to(torch.bfloat16)))
    source = torch.randn(64, 48, dtype=torch.float64).t()  # another dtype, not contiguous
    held = torch.zeros(48, 64, dtype=torch.bfloat16)
    advance(held, source)
    assert np.array_equal(_bits(held), _bits(source.to(torch.bfloat16)))
    with pytest.raises(ValueError, match="cannot advance"):
        advance(held, torch.zeros(3))


def test_advance_all_gives_each_pair_its_own_result_whichever_thread_ran_it():
    g = torch.Generator().manual_seed(2)
    sizes = [1 << 17, 1 << 16, 300, 1 << 18, 5, 1 << 16]
    sources = [torch.randn(n, generator=g) for n in sizes]
    helds = [s.to(torch.bfloat16) for s in sources]
    for s in sources:
        s[::97] += 0.5
    serial = [change_of(h.clone(), s.to(torch.bfloat16)) for h, s in zip(helds, sources, strict=True)]
    results = advance_all(list(zip(helds, sources, strict=True)))
    for held, source, got, want in zip(helds, sources, results, serial, strict=True):
        assert np.array_equal(_bits(held), _bits(source.to(torch.bfloat16)))
        if isinstance(want, SparseChange):
            assert isinstance(got, SparseChange) and torch.equal(got.indices, want.indices)
        else:  # the 5 elements: cheaper whole
            assert got is held and want is not None


def test_a_sparse_change_written_back_rebuilds_the_tensor():
    old = _odd_values(5000, 3).to(torch.bfloat16)
    new = old.clone()
    new[::7] = 1.0
    change = change_of(old, new)
    assert isinstance(change, SparseChange) and change.indices.numel() < whole_at(5000, 2)
    rebuilt = old.clone()
    set_elements(rebuilt, change)
    assert np.array_equal(_bits(rebuilt), _bits(new))


def test_block_offsets_and_back_and_the_order_check():
    from mgrpo_actors.weights.kernels import block_offsets, indices_of_blocks, strictly_increasing

    rng = np.random.default_rng(4)
    indices = np.unique(rng.integers(0, 5 * 65_536 + 9, 20_000)).astype(np.int32)
    counts, offsets = block_offsets(indices, 6, 16)
    assert counts.tolist() == np.bincount(indices >> 16, minlength=6).tolist()
    assert np.array_equal(offsets, (indices & 0xFFFF).astype(np.uint16))
    assert np.array_equal(indices_of_blocks(counts, offsets, 16), indices)
    assert indices_of_blocks(np.array([2], np.int32), np.array([5, 5], np.uint16), 16) is None  # not rising
    with pytest.raises(ValueError, match="past 1 blocks"):
        block_offsets(np.array([65_536], np.int32), 1, 16)
    assert strictly_increasing(indices) and strictly_increasing(np.array([], np.int32))
    assert not strictly_increasing(np.array([1, 3, 3], np.int32))


def test_a_nan_first_met_in_a_later_chunk_of_a_sparse_change_on_either_thread():
    n = (1 << 18) * 2 + 5  # the NaN in the second chunk: the compiled cast hands over to torch's whole cast there
    sources = [torch.randn(n, generator=torch.Generator().manual_seed(s)) for s in (6, 7)]
    helds = [s.to(torch.bfloat16) for s in sources]
    for source in sources:
        source[::1000] += 0.5
        source[(1 << 18) + 11] = float("nan")
    changes = advance_all(list(zip(helds, sources, strict=True)))  # one on each thread
    for held, source, change in zip(helds, sources, changes, strict=True):
        assert np.array_equal(_bits(held), _bits(source.to(torch.bfloat16)))
        assert isinstance(change, SparseChange) and (1 << 18) + 11 in change.indices.tolist()
