"""Weight sync's work shared out between two threads (mgrpo_actors/weights/two_threads.py) and its users: every item
runs once and its result comes back in order, errors surface only once both threads are done; a delta's elements
written on two threads (delta.set_all_elements), decoded on two threads (wire.read_delta) and
a file hashed on the second thread while written (wire.write_version) give what one thread gave, bit for bit."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
import torch

from mgrpo_actors.weights.delta import SparseChange, WeightsDelta, apply_delta, set_all_elements
from mgrpo_actors.weights.two_threads import SHARE_FROM, share_out
from mgrpo_actors.weights.wire import delta_entries, read_delta, read_header, write_version


def test_every_item_runs_once_in_order_and_large_items_go_to_both_threads():
    sizes = [SHARE_FROM * 4, 10, SHARE_FROM * 3, SHARE_FROM * 2, 5, SHARE_FROM]
    ran: list[tuple[int, int]] = []
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            ran.append((i, threading.get_ident()))
        return i * i

    assert share_out(len(sizes), sizes.__getitem__, work) == [i * i for i in range(len(sizes))]
    assert sorted(i for i, _ in ran) == list(range(len(sizes)))  # each once
    here = threading.get_ident()
    by_item = dict(ran)
    assert {by_item[1], by_item[4]} == {here}  # too small to hand over
    assert {by_item[i] for i in (0, 2, 3, 5)} == {here, next(t for t in by_item.values() if t != here)}
    assert by_item[0] == here and by_item[2] != here  # the largest first, each to the side with less so far


def test_items_not_shareable_or_under_the_bar_stay_on_the_calling_thread():
    here = threading.get_ident()
    threads = share_out(4, lambda i: SHARE_FROM * 8, lambda i: threading.get_ident(), lambda i: i != 1)
    assert threads[1] == here and threads.count(here) < 4
    assert share_out(3, lambda i: 100, lambda i: threading.get_ident(), share_from=1000) == [here] * 3
    assert set(share_out(3, lambda i: 100, lambda i: threading.get_ident(), share_from=10)) != {here}


def test_called_from_the_second_threads_work_it_runs_there_instead_of_waiting_for_itself():
    def outer(i: int) -> list[int]:
        return share_out(3, lambda j: SHARE_FROM * 4, lambda j: threading.get_ident())

    inner = share_out(2, lambda i: SHARE_FROM * (2 - i), outer)  # item 1's inner call runs on the second thread
    assert len(set(inner[1])) == 1 and inner[1][0] != threading.get_ident()


def test_an_error_on_either_side_is_raised_once_both_sides_are_done():
    finished = threading.Event()

    def slow_then_fine(i: int) -> int:
        if i == 1:  # the second thread's item
            time.sleep(0.2)
            finished.set()
        elif i == 0:
            raise RuntimeError("calling thread's item failed")
        return i

    with pytest.raises(RuntimeError, match="calling thread's item failed"):
        share_out(2, lambda i: SHARE_FROM * (2 - i), slow_then_fine)
    assert finished.is_set()  # it never returned while the second thread still worked

    def second_fails(i: int) -> int:
        if i == 1:
            raise ValueError("second thread's item failed")
        return i

    with pytest.raises(ValueError, match="second thread's item failed"):
        share_out(2, lambda i: SHARE_FROM * (2 - i), second_fails)


def _changes(seed: int) -> list[tuple[torch.Tensor, SparseChange, torch.Tensor]]:
    """(target, change, expected) for tensors large enough to be shared out: bf16 and fp32, one non-contiguous
    target and one whose values are of another dtype (the torch path, kept on the calling thread)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k, (dtype, n) in enumerate(
        [(torch.bfloat16, 300_000), (torch.float32, 200_000), (torch.bfloat16, 150_000)] * 2
    ):
        target = torch.randn(n, generator=g).to(dtype)
        if k == 4:
            target = torch.randn(n // 500, 1000, generator=g).to(dtype)[:, ::2]  # non-contiguous
        indices = torch.randperm(target.numel(), generator=g)[: 5_000 + 1_000 * k].sort().values.to(torch.int32)
        values = torch.randn(indices.numel(), generator=g).to(torch.float64 if k == 5 else dtype)
        expected = target.clone()
        expected.view(-1)[indices.long()] = values.to(dtype)
        out.append((target, SparseChange(tuple(target.shape), indices, values), expected))
    return out


def test_a_deltas_elements_written_on_two_threads_are_what_one_writes_and_move_every_version():
    cases = _changes(0)
    before = [target._version for target, _, _ in cases]
    set_all_elements([(target, change) for target, change, _ in cases])
    for (target, _, expected), version in zip(cases, before, strict=True):
        assert torch.equal(target, expected)  # no NaN here: equal values are equal bits
        assert target._version > version  # a packed copy of it must know it changed


@pytest.mark.parametrize("with_whole", [False, True], ids=["sparse-only", "with-a-whole-tensor"])
def test_a_delta_decoded_on_two_threads_rebuilds_the_weights_bit_for_bit(tmp_path, with_whole):
    g = torch.Generator().manual_seed(1)
    base = {f"w{i}": torch.randn(200_000, generator=g).to(torch.bfloat16) for i in range(5)}
    base["whole"] = torch.randn(64, 64, generator=g)
    new = {name: t.clone() for name, t in base.items()}
    sparse = {}
    for i in range(5):
        flat = new[f"w{i}"]
        at = torch.randperm(flat.numel(), generator=g)[: 6_000 + 500 * i].sort().values
        flat[at] += 1.0
        sparse[f"w{i}"] = SparseChange(tuple(flat.shape), at.to(torch.int32), flat[at].clone())
    new["whole"] = torch.randn(64, 64, generator=g)
    entries = [entry for name, change in sparse.items() for entry in delta_entries(name, change)]
    metadata = {
        "mgrpo.kind": "delta",
        "mgrpo.version": "2",
        "mgrpo.base": "1",
        "mgrpo.base_sha256": "0" * 64,
        "mgrpo.shapes": '{"w0":[200000],"w1":[200000],"w2":[200000],"w3":[200000],"w4":[200000]}',
    }
    path = tmp_path / "v2.safetensors"
    if not with_whole:
        new["whole"] = base["whole"]
    sha256, size = write_version(path, [*entries, *([("whole", new["whole"])] if with_whole else [])], metadata)
    data = path.read_bytes()
    assert sha256 == hashlib.sha256(data).hexdigest() and size == len(data)
    delta = read_delta(path, read_header(path))
    assert isinstance(delta, WeightsDelta) and set(delta.sparse) == set(sparse)
    assert set(delta.whole) == ({"whole"} if with_whole else set())
    state = {name: t.clone() for name, t in base.items()}
    apply_delta(state, delta)
    for name, tensor in new.items():
        assert state[name].dtype == tensor.dtype and torch.equal(state[name], tensor)  # randn: no NaN, no -0.0


def test_a_truncated_delta_file_is_refused_with_a_clear_error(tmp_path):
    change = SparseChange((100_000,), torch.arange(0, 100_000, 7, dtype=torch.int32), torch.ones(14_286))
    metadata = {
        "mgrpo.kind": "delta",
        "mgrpo.version": "2",
        "mgrpo.base": "1",
        "mgrpo.base_sha256": "0" * 64,
        "mgrpo.shapes": '{"w":[100000]}',
    }
    path = tmp_path / "v2.safetensors"
    write_version(path, delta_entries("w", change), metadata)
    header = read_header(path)
    path.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(ValueError, match="is not a policy version: .*not fully covered"):
        read_delta(path, header)


def test_indices_known_to_rise_are_still_checked_against_the_tensors_bounds():
    with pytest.raises(ValueError, match="leave a tensor of 10 elements"):
        SparseChange((10,), torch.tensor([3, 10], dtype=torch.int32), torch.zeros(2), rising=True)
    with pytest.raises(ValueError, match="not strictly increasing"):  # unless their maker proved it
        SparseChange((10,), torch.tensor([4, 3], dtype=torch.int32), torch.zeros(2))


def test_a_delta_naming_a_tensor_past_int32_indices_is_refused(tmp_path):
    change = SparseChange((10,), torch.tensor([1, 2], dtype=torch.int32), torch.zeros(2))
    entries = delta_entries("w", change)
    blocks = -(-(2**32) >> 16)
    entries[0] = ("w@counts", torch.zeros(blocks, dtype=torch.int32).index_fill_(0, torch.tensor([0]), 2))
    metadata = {
        "mgrpo.kind": "delta",
        "mgrpo.version": "2",
        "mgrpo.base": "1",
        "mgrpo.base_sha256": "0" * 64,
        "mgrpo.shapes": f'{{"w":[{2**32}]}}',
    }
    path = tmp_path / "v2.safetensors"
    write_version(path, entries, metadata)
    with pytest.raises(ValueError, match="cannot change element by element"):
        read_delta(path, read_header(path))


def test_a_large_file_hashed_on_the_second_thread_while_written_has_its_bytes_sha256(tmp_path):
    g = torch.Generator().manual_seed(2)
    tensors = [("a", torch.randn(1_200_000, generator=g)), ("b", torch.randn(300, 7, generator=g).to(torch.bfloat16))]
    path = tmp_path / "v1.safetensors"
    sha256, size = write_version(path, tensors, {"mgrpo.kind": "full", "mgrpo.version": "1"})
    data = path.read_bytes()
    assert size == len(data) > 4 << 20 and sha256 == hashlib.sha256(data).hexdigest()
