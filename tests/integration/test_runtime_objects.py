"""The object store as weights travel through it (runtime/objects.py), on a real nats-server: a file
of several chunks comes back byte for byte through message gets, with no consumer made; a missing
object, and one whose chunk went away while it was read, are FileNotFoundError naming it, and leave no
partial file behind."""

from __future__ import annotations

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
