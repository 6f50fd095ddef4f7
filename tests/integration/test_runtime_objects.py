"""The object store as weights travel through it (runtime/objects.py, weights/), on a real nats-server: a
file of several chunks comes back byte for byte through direct and message gets, with no consumer made; a
missing object, and one whose chunk went away while it was read, are FileNotFoundError naming it, and
leave no partial file behind; full snapshots and deltas bring a late engine to the learner's weights."""

from __future__ import annotations

import hashlib
import os

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_a_file_of_many_chunks_comes_back_whole_without_a_consumer(bus, tmp_path):
    store = bus.object_store(bus.subjects.bucket("weights-main"))
    source = tmp_path / "w.bin"
    source.write_bytes(os.urandom(1024 * 1024 + 17))  # 9 chunks of nats-py's 128 KiB
    assert store.put_file("w", source) == source.stat().st_size
    back = store.get_file("w", tmp_path / "back" / "w.bin")
    assert back.read_bytes() == source.read_bytes()
    assert bus.stream_info(f"OBJ_{store.name}").state.consumer_count == 0


def test_a_missing_or_broken_object_is_file_not_found_and_leaves_no_partial_file(bus, tmp_path):
    store = bus.object_store(bus.subjects.bucket("weights-sub"))
    with pytest.raises(FileNotFoundError, match="no object 'absent'"):
        store.get_file("absent", tmp_path / "absent.bin")
    assert not (tmp_path / "absent.bin").exists()

    source = tmp_path / "w.bin"
    source.write_bytes(os.urandom(300 * 1024))  # 3 chunks
    store.put_file("w", source)
    stream = f"OBJ_{store.name}"
    last_chunk = bus.stream_info(stream).state.last_seq - 1  # the meta entry comes after the chunks
    bus.call(bus._js.delete_msg(stream, last_chunk))
    with pytest.raises(FileNotFoundError, match="deleted while being read"):
        store.get_file("w", tmp_path / "broken.bin")
    assert not (tmp_path / "broken.bin").exists()


def test_an_object_is_read_whole_however_the_direct_gets_answer(bus, tmp_path, monkeypatch):
    """Batched direct gets that stop answering part-way (a replica behind its leader) or never do: the rest
    comes by message gets, byte for byte; a digest other than the expected one is refused before reading."""
    from mgrpo_actors.runtime import objects

    store = bus.object_store(bus.subjects.bucket("weights-main"))
    source = tmp_path / "w.bin"
    source.write_bytes(os.urandom(1024 * 1024 + 5))  # 9 chunks
    store.put_file("w", source)
    direct = objects._direct_batch
    answered = []

    async def short(js, answers, inbox, stream, subject, seq, count):  # noqa: ANN001
        answered.append(seq)
        return await direct(js, answers, inbox, stream, subject, seq, min(count, 3)) if len(answered) == 1 else []

    monkeypatch.setattr(objects, "_direct_batch", short)
    assert store.get_file("w", tmp_path / "a.bin").read_bytes() == source.read_bytes()
    assert answered == [1, answered[1]] and answered[1] > 3  # one batch of 3, then one that answered nothing
    monkeypatch.setattr(objects, "_direct_batch", direct)
    sha256 = hashlib.sha256(source.read_bytes()).hexdigest()
    assert store.get_file("w", tmp_path / "b.bin", sha256=sha256).read_bytes() == source.read_bytes()
    with pytest.raises(ValueError, match="not the 000000000000… expected"):
        store.get_file("w", tmp_path / "c.bin", sha256="0" * 64)
    assert not (tmp_path / "c.bin").exists()


def test_deltas_through_the_object_store_bring_a_late_engine_to_the_learners_weights(bus, tmp_path):
    """A learner's versions (full snapshot, deltas, full snapshot, delta) in the side's bucket: an engine that
    loaded none rebuilds the newest bit for bit from the full snapshot before it; what a late engine no longer
    needs is deleted."""
    import torch

    from mgrpo_actors.config.learner import WeightsConfig
    from mgrpo_actors.engines.hf import HFEngine
    from mgrpo_actors.models.loader import load_model
    from mgrpo_actors.weights.encoder import WeightsEncoder
    from mgrpo_actors.weights.files import tied_aliases
    from mgrpo_actors.weights.store import WeightsStore
    from mgrpo_actors.weights.sync import PolicySync, latest_key

    model, tokenizer = load_model("tiny:main", dtype=torch.bfloat16)
    cfg = WeightsConfig(full_every=3, keep_versions=1)
    learner = WeightsStore(bus, "main", cfg, tmp_path / "learner")
    encoder = WeightsEncoder(torch.bfloat16, cfg.full_every, tied_aliases(model))
    state = {name: t.float().clone() for name, t in model.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    for version in range(1, 6):
        for t in state.values():
            t.view(-1)[torch.randint(0, t.numel(), (t.numel() // 20 + 1,), generator=g)] += 0.01
        written = encoder.write(state, version, tmp_path / "learner" / f"v{version}.safetensors")
        announced = learner.publish(written.path, version, version - 1, base=written.base, sha256=written.sha256)
        bus.kv(bus.subjects.bucket("versions-main")).put(latest_key("main"), announced)
    assert announced.base == 4 and announced.uri.startswith("nats-os://")
    engine = HFEngine(load_model("tiny:main", dtype=torch.bfloat16)[0], tokenizer)
    sync = PolicySync(bus, "main", engine, WeightsStore(bus, "main", cfg, tmp_path / "engine"))
    sync.ensure(5)
    held = engine.model.state_dict()
    assert engine.policy_version == 5 and sync.loads == 1
    assert all(torch.equal(held[n].view(torch.int16), wire.view(torch.int16)) for n, wire in encoder.last.items())
    with pytest.raises(FileNotFoundError):  # before full snapshot 4 and the newest one: let go
        learner.fetch_version(announced, 2, "")


def test_a_deleted_object_leaves_nothing_in_its_bucket(bus, tmp_path):
    """A learner deletes one old version a step: nats-py's delete alone kept a 'deleted' meta entry per name, so the
    bucket grew for the whole run. Deleting an absent object is no error."""
    store = bus.object_store(bus.subjects.bucket("weights-main"))
    stream = f"OBJ_{store.name}"
    source = tmp_path / "w.bin"
    for version in range(1, 6):
        source.write_bytes(os.urandom(200 * 1024))  # 2 chunks
        store.put_file(f"v{version}.safetensors", source)
        if version > 2:
            store.delete(f"v{version - 2}.safetensors")
    assert bus.stream_info(stream).state.messages == 2 * 3  # v4 and v5: 2 chunks and a meta entry each
    store.delete("v1.safetensors")
    with pytest.raises(FileNotFoundError, match="no object 'v3.safetensors'"):
        store.get_file("v3.safetensors", tmp_path / "v3.bin")
    assert store.get_file("v5.safetensors", tmp_path / "v5.bin").read_bytes() == source.read_bytes()
