"""Engines kept at the learner's versions through a shared directory (mgrpo_actors/weights/sync.py, chain.py,
store.py; no NATS: a dict stands in for KV): an engine that loads every version, one that missed some, a new
one, one holding another chain's weights after a learner restarted, and one that takes no deltas all end
bit-identical to the learner's wire weights; an hf engine refuses a delta against another version; the
directory keeps every version from the newest full snapshot on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mgrpo_actors.config.learner import WeightsConfig
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.weights.chain import fetch_chain, rebuild
from mgrpo_actors.weights.encoder import WeightsEncoder
from mgrpo_actors.weights.files import tied_aliases
from mgrpo_actors.weights.store import WeightsStore
from mgrpo_actors.weights.sync import PolicySync, latest_key
from protocols import Subjects, WeightsVersion, encode

SIDE = "main"


class _Kv:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, value) -> None:  # noqa: ANN001
        self.data[key] = value if isinstance(value, bytes) else encode(value)


class _Bus:
    def __init__(self) -> None:
        self.run_id, self.subjects, self.kvs = "t1", Subjects("t1"), {}

    def kv(self, name: str) -> _Kv:
        return self.kvs.setdefault(name, _Kv())


class _Learner:
    """What the learner does after each step: write the version, publish it, record it as the latest."""

    def __init__(self, bus: _Bus, tmp: Path, dtype: torch.dtype, full_every: int, skip: set[str]) -> None:
        cfg = WeightsConfig(
            transport="directory", directory=str(tmp / "shared"), keep_versions=2, full_every=full_every
        )
        self.bus, self.tmp, self.dtype, self.full_every, self.skip = bus, tmp, dtype, full_every, skip
        self.store = WeightsStore(bus, SIDE, cfg, tmp / "learner")
        self.encoder = WeightsEncoder(dtype, full_every, skip)

    def restart(self) -> None:
        self.encoder = WeightsEncoder(self.dtype, self.full_every, self.skip)

    def publish(self, state: dict[str, torch.Tensor], version: int) -> WeightsVersion:
        written = self.encoder.write(state, version, self.tmp / "learner" / f"v{version}.safetensors")
        announced = self.store.publish(written.path, version, version - 1, base=written.base, sha256=written.sha256)
        self.bus.kv(self.bus.subjects.bucket(f"versions-{SIDE}")).put(latest_key(SIDE), announced)
        return announced


def _states(model: torch.nn.Module, count: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """`count` learner states (fp32), each a sparse random step from the one before."""
    g = torch.Generator().manual_seed(seed)
    state = {name: t.detach().float().clone() for name, t in model.state_dict().items()}
    states = []
    for _ in range(count):
        state = {name: t.clone() for name, t in state.items()}
        for t in state.values():
            flat = t.view(-1)
            picked = torch.randint(0, flat.numel(), (max(1, flat.numel() // 50),), generator=g)
            flat[picked] += torch.randn(picked.numel(), generator=g) * 0.05
        states.append(state)
    return states


def _engine(bus: _Bus, tmp: Path, name: str, dtype: torch.dtype = torch.float32) -> PolicySync:
    model, tokenizer = load_model("tiny:main", dtype=dtype)
    store = WeightsStore(bus, SIDE, WeightsConfig(transport="directory"), tmp / name)
    return PolicySync(bus, SIDE, HFEngine(model, tokenizer), store)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def _assert_holds(sync: PolicySync, learner: _Learner) -> None:
    """The engine's weights are the learner's wire weights, bit for bit (its dtype is the wire dtype)."""
    held = sync.engine.model.state_dict()  # type: ignore[attr-defined]
    for name, wire in learner.encoder.last.items():
        assert held[name].dtype == wire.dtype and torch.equal(_bits(held[name]), _bits(wire)), name


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny:main")[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_engines_that_load_every_version_or_missed_some_end_bit_identical(tmp_path, tiny, dtype):
    bus = _Bus()
    learner = _Learner(bus, tmp_path, dtype, full_every=4, skip=tied_aliases(tiny))
    steady, late, new = (_engine(bus, tmp_path, n, dtype) for n in ("steady", "late", "new"))
    states = _states(tiny, 7)
    for version, state in enumerate(states, start=1):
        announced = learner.publish(state, version)
        assert (announced.base is None) == (version in (1, 5)), (version, announced.base)
        assert steady.load(announced) and steady.engine.policy_version == version
        _assert_holds(steady, learner)
        # late misses 3, 4 and 5 (6 takes it through full snapshot 5, not from its own 2), then 7
        if version in (1, 2, 6):
            late.load(announced)
            _assert_holds(late, learner)
    assert not steady.load(announced)  # the same version again: nothing to do
    late.ensure(7)  # missed 7: takes it from the latest announcement
    _assert_holds(late, learner)
    new.ensure(7)  # never loaded anything: full snapshot 5, then deltas 6 and 7
    assert new.engine.policy_version == 7 and new.held == steady.held
    _assert_holds(new, learner)


def test_an_engine_that_missed_deltas_applies_only_those_it_missed(tmp_path, tiny):
    bus = _Bus()
    learner = _Learner(bus, tmp_path, torch.bfloat16, full_every=10, skip=tied_aliases(tiny))
    sync = _engine(bus, tmp_path, "engine", torch.bfloat16)
    fetched: list[int] = []
    fetch = sync.store.fetch_version
    sync.store.fetch_version = lambda a, v, s: (fetched.append(v), fetch(a, v, s))[1]  # type: ignore[method-assign]
    states = _states(tiny, 5, seed=3)
    sync.load(learner.publish(states[0], 1))
    for version in (2, 3, 4):
        announced = learner.publish(states[version - 1], version)
    fetched.clear()
    assert sync.load(announced)
    assert fetched == [4, 3, 2]  # back to its own base (1), never to the full snapshot
    _assert_holds(sync, learner)


def test_after_a_learner_restart_an_engine_of_the_old_chain_reloads_a_full_snapshot(tmp_path, tiny):
    bus = _Bus()
    learner = _Learner(bus, tmp_path, torch.float32, full_every=10, skip=tied_aliases(tiny))
    sync = _engine(bus, tmp_path, "engine")
    states = _states(tiny, 4, seed=5)
    for version in (1, 2, 3):
        sync.load(learner.publish(states[version - 1], version))
    # The learner dies after announcing 3 but resumes from an older checkpoint: it makes version 3 again, other
    # weights, as a full snapshot, then 4 as a delta against that one.
    learner.restart()
    again = learner.publish(states[3], 3)
    assert again.base is None and sync.load(again)  # same version, another file: news
    _assert_holds(sync, learner)
    learner.restart()
    learner.publish(states[0], 3)  # and once more, but this engine does not hear of it
    delta = learner.publish(states[1], 4)
    assert delta.base == 3
    assert sync.load(delta)  # its base is another 3 than the one held: back to the full snapshot
    _assert_holds(sync, learner)


def test_an_engine_without_deltas_gets_the_changed_tensors_whole(tmp_path, tiny):
    class _Plain:
        def __init__(self) -> None:
            self.policy_version, self.loaded = 0, []

        def generate(self, prompts, params):  # noqa: ANN001
            return []

        def load_weights(self, weights, version: int) -> None:  # noqa: ANN001
            self.loaded.append((version, weights if isinstance(weights, dict) else Path(weights)))
            self.policy_version = version

    bus = _Bus()
    learner = _Learner(bus, tmp_path, torch.float32, full_every=10, skip=tied_aliases(tiny))
    engine = _Plain()
    sync = PolicySync(bus, SIDE, engine, WeightsStore(bus, SIDE, WeightsConfig(transport="directory"), tmp_path / "p"))
    states = _states(tiny, 3, seed=7)
    for version, state in enumerate(states, start=1):
        sync.load(learner.publish(state, version))
    assert isinstance(engine.loaded[0][1], Path) and all(isinstance(w, dict) for _, w in engine.loaded[1:])
    assert sync.mirror is not None
    for name, wire in learner.encoder.last.items():
        assert torch.equal(_bits(sync.mirror[name]), _bits(wire)), name


def test_an_hf_engine_refuses_a_delta_against_another_version(tmp_path, tiny):
    bus = _Bus()
    learner = _Learner(bus, tmp_path, torch.float32, full_every=10, skip=tied_aliases(tiny))
    sync = _engine(bus, tmp_path, "engine")
    states = _states(tiny, 3, seed=9)
    sync.load(learner.publish(states[0], 1))
    learner.publish(states[1], 2)
    third = fetch_chain(learner.store, learner.publish(states[2], 3), None)[-1].delta  # against version 2
    assert third is not None and third.base == 2
    before = {n: t.clone() for n, t in sync.engine.model.state_dict().items()}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="against version 2, but the engine holds version 1"):
        sync.engine.load_weights(third, 3)
    after = sync.engine.model.state_dict()  # type: ignore[attr-defined]
    assert sync.engine.policy_version == 1 and all(torch.equal(before[n], after[n]) for n in before)


def test_the_directory_keeps_every_version_from_the_newest_full_snapshot_on(tmp_path, tiny):
    bus = _Bus()
    learner = _Learner(bus, tmp_path, torch.bfloat16, full_every=3, skip=tied_aliases(tiny))
    directory = learner.store.shared_dir
    kept = []
    for version, state in enumerate(_states(tiny, 8, seed=11), start=1):
        last = learner.publish(state, version)
        kept.append(sorted(int(p.stem[1:]) for p in directory.glob("v*.safetensors")))
    # fulls at 1, 4, 7; keep_versions 2
    assert kept == [[1], [1, 2], [1, 2, 3], [3, 4], [4, 5], [4, 5, 6], [6, 7], [7, 8]]
    rebuilt = rebuild(learner.store, last)
    for name, wire in learner.encoder.last.items():
        assert torch.equal(_bits(rebuilt[name]), _bits(wire)), name


def test_the_chain_walks_back_to_the_full_snapshot_or_to_what_is_held_and_checks_every_digest(tmp_path, tiny):
    """Versions 1 (full), 2, 3 (deltas): from nothing the chain is [1, 2, 3] with 1's file, from 1 held [2, 3];
    each link's digest is the one that names it (the announcement, then each delta's base_sha256); a base
    file whose bytes changed is refused."""
    bus = _Bus()
    learner = _Learner(bus, tmp_path, torch.bfloat16, full_every=10, skip=tied_aliases(tiny))
    announced = [learner.publish(state, v) for v, state in enumerate(_states(tiny, 3, seed=13), start=1)]
    chain = fetch_chain(learner.store, announced[2], None)
    assert [link.version for link in chain] == [1, 2, 3] and chain[0].path is not None and chain[0].delta is None
    assert [link.sha256 for link in chain] == [a.sha256 for a in announced]
    assert chain[2].delta is not None and (chain[2].delta.base, chain[2].delta.base_sha256) == (2, announced[1].sha256)
    from_held = fetch_chain(learner.store, announced[2], (1, announced[0].sha256))
    assert [link.version for link in from_held] == [2, 3] and all(link.path is None for link in from_held)
    rebuilt = rebuild(learner.store, announced[2])
    for name, wire in learner.encoder.last.items():
        assert torch.equal(_bits(rebuilt[name]), _bits(wire)), name
    base = learner.store.shared_dir / "v2.safetensors"
    data = bytearray(base.read_bytes())
    data[-1] ^= 0x01  # one bit of one weight
    base.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        fetch_chain(learner.store, announced[2], None)
