"""A long build that outlives its interruption (models/cache.py build_resumable): the partial directory is kept
for the next call to go on from, the target appears whole or not at all, and one builder at a time gets in."""

from __future__ import annotations

import threading
import time

import pytest

from mgrpo_actors.models.cache import build_resumable, left_by_interrupted_build


def test_an_interrupted_build_leaves_its_work_for_the_next_call(tmp_path):
    target = tmp_path / "warm"
    seen: list[list[str]] = []

    def build(partial, fail: bool) -> None:
        seen.append(sorted(p.name for p in partial.iterdir()))
        (partial / f"part{len(seen)}").write_text("saved")
        if fail:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # stopped before it saved anything: nothing said to go on
        build_resumable(target, lambda partial: (_ for _ in ()).throw(KeyboardInterrupt))
    assert (tmp_path / ".warm.partial").is_dir() and not left_by_interrupted_build(target)
    with pytest.raises(KeyboardInterrupt):
        build_resumable(target, lambda partial: build(partial, fail=True))
    assert not target.exists() and (tmp_path / ".warm.partial" / "part1").is_file()
    assert left_by_interrupted_build(target)
    assert build_resumable(target, lambda partial: build(partial, fail=False)) == target
    assert seen == [[], ["part1"]]  # the second build found the first one's work
    assert sorted(p.name for p in target.iterdir()) == [".complete", "part1", "part2"]
    assert not (tmp_path / ".warm.partial").exists() and not left_by_interrupted_build(target)
    assert build_resumable(target, lambda partial: pytest.fail("built twice")) == target


def test_a_second_builder_waits_for_the_first_and_finds_the_target_built(tmp_path):
    target = tmp_path / "warm"
    started, release = threading.Event(), threading.Event()
    built: list[str] = []
    waited: list[float] = []

    def slow(partial) -> None:
        started.set()
        release.wait(10)
        (partial / "weights").write_text("w")
        built.append("first")

    first = threading.Thread(target=build_resumable, args=(target, slow))
    first.start()
    started.wait(10)
    threading.Timer(0.3, release.set).start()
    began = time.perf_counter()
    assert build_resumable(target, lambda partial: built.append("second"), lambda: waited.append(1.0)) == target
    first.join(10)
    assert built == ["first"] and waited == [1.0] and time.perf_counter() - began >= 0.2
    assert (target / "weights").read_text() == "w"
