"""A full disk, for real: a small tmpfs mounted for the test (root only; skipped, saying why, where mounting is
not allowed). Every writer leaves the old file or nothing, never a part, and says "no space left on device"
naming the path: the run's summary (runtime/disk.py), a learner checkpoint of the tiny model under DeepSpeed
(learner/checkpoints.py: the partial checkpoint removed, `latest` naming the newest complete one again). The
embedded nats-server's JetStream store filling up mid-run stops the run, naming the store (runtime/store_full.py),
and `--resume` continues it once space is back."""

from __future__ import annotations

import copy
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mgrpo_actors.runtime.disk import DiskFullError, atomic_write_text, no_space_left

pytestmark = pytest.mark.integration


@pytest.fixture
def mount_tmpfs(tmp_path) -> Iterator:
    """mount_tmpfs(bytes) -> a tmpfs of that size (unmounted after the test)."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        where = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
        where.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): needs root")
        mounted.append(where)
        return where

    try:
        yield mount
    finally:
        for where in mounted:
            subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_summary_that_does_not_fit_leaves_the_old_one_whole_and_says_why(mount_tmpfs):
    disk = mount_tmpfs(1024 * 1024)
    path = disk / "summary.json"
    atomic_write_text(path, '{"steps": []}\n', "the run summary")
    with pytest.raises(DiskFullError) as raised:
        atomic_write_text(path, "x" * (2 * 1024 * 1024), "the run summary")
    assert raised.value.strerror == f"no space left on device: the run summary not written to {path}"
    assert path.read_text() == '{"steps": []}\n'  # the old file, whole
    assert sorted(p.name for p in disk.iterdir()) == ["summary.json"]  # no partial file
    assert no_space_left(OSError("unrelated"), disk) is False  # another error on a device with room left


def test_a_checkpoint_that_does_not_fit_is_removed_and_latest_names_the_complete_one(mount_tmpfs, tmp_path):
    from mgrpo_actors.algo.config import ObjectiveConfig
    from mgrpo_actors.config.learner import LearnerConfig
    from mgrpo_actors.learner.checkpoints import Checkpoints
    from mgrpo_actors.learner.trainer import PolicyTrainer
    from mgrpo_actors.models.loader import load_model

    model, tokenizer = load_model("tiny:main")
    trainer = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, LearnerConfig(), ObjectiveConfig())
    Checkpoints(tmp_path / "measure").save(trainer, tokenizer, "step0", {"step": 0})
    size = sum(p.stat().st_size for p in (tmp_path / "measure").rglob("*") if p.is_file())
    disk = mount_tmpfs(size * 3 // 2 + 64 * 1024)  # room for one checkpoint, not for two

    checkpoints = Checkpoints(disk / "checkpoints")
    checkpoints.save(trainer, tokenizer, "step0", {"step": 0})
    with pytest.raises(DiskFullError) as raised:
        checkpoints.save(trainer, tokenizer, "step1", {"step": 1})
    assert f"no space left on device: checkpoint step1 not written to {disk / 'checkpoints' / 'step1'}" in str(
        raised.value
    )
    assert not (disk / "checkpoints" / "step1").exists()  # the partial checkpoint is gone
    assert checkpoints.latest() == "step0"  # the complete one is named again, and loads
    restarted = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, LearnerConfig(), ObjectiveConfig())
    assert checkpoints.load(restarted) == {"step": 0}


def test_a_weights_version_that_does_not_fit_leaves_no_file_and_says_why(mount_tmpfs):
    import torch

    from mgrpo_actors.weights.wire import write_version

    disk = mount_tmpfs(1024 * 1024)
    path = disk / "v3.safetensors"
    with pytest.raises(DiskFullError) as raised:
        write_version(path, [("w", torch.zeros(512 * 1024))], {"mgrpo.kind": "full", "mgrpo.version": "3"})
    assert raised.value.strerror == f"no space left on device: weights version 3 not written to {path}"
    assert list(disk.iterdir()) == []  # no part of a version to be mistaken for one


def test_a_file_moved_to_another_filesystem_arrives_whole_or_not_at_all(mount_tmpfs, tmp_path):
    """The directory transport's shared weights directory on another filesystem than the learner's scratch space:
    a rename fails there (EXDEV); the file is copied under a temporary name, renamed, and only then removed."""
    from mgrpo_actors.runtime.disk import move_into

    disk = mount_tmpfs(1024 * 1024)
    source = tmp_path / "v1.safetensors"
    source.write_bytes(b"w" * 300_000)
    moved = move_into(source, disk / "main" / "v1.safetensors", "weights version 1")
    assert moved.read_bytes() == b"w" * 300_000 and not source.exists()
    big = tmp_path / "v2.safetensors"
    big.write_bytes(b"w" * 900_000)
    with pytest.raises(DiskFullError) as raised:
        move_into(big, disk / "main" / "v2.safetensors", "weights version 2")
    assert (
        raised.value.strerror
        == f"no space left on device: weights version 2 not written to {disk / 'main' / 'v2.safetensors'}"
    )
    assert big.exists() and sorted(p.name for p in (disk / "main").iterdir()) == ["v1.safetensors"]


def test_a_comparison_plot_that_does_not_fit_leaves_no_file_and_says_why(mount_tmpfs):
    """mgrpo compare's (and the run report's) plots are rendered in memory and written whole or not at all."""
    from mgrpo_actors.compare.plot import write_compare_png

    disk = mount_tmpfs(16 * 1024)
    rewards = [{"step": s, "main_reward_mean": 0.1 * s, "sub_reward_mean": 0.05 * s} for s in range(50)]
    result = {"rewards": rewards, "evals": [{"step": 0, "accuracy": {"mean": 0.1, "min": 0.0, "max": 0.2}}]}
    with pytest.raises(DiskFullError) as raised:
        write_compare_png({"m-grpo": {"runs": [result]}}, disk / "compare.png")
    assert (
        raised.value.strerror == f"no space left on device: the comparison plot not written to {disk / 'compare.png'}"
    )
    assert list(disk.iterdir()) == []


def _fill(disk: Path, leave: int = 4096) -> Path:
    """Another writer takes all of `disk` but `leave` bytes (the run's own checkpoints, someone's download)."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    subprocess.run(["fallocate", "-l", str(free - leave), str(filler)], check=True)
    return filler


def test_a_store_at_its_jetstream_limit_stops_the_run_at_once_naming_the_store(mount_tmpfs):
    """nats-server's own limit (75 % of the disk free at its start) answers a publish at once: StoreFull naming the
    store, and the run stopped once (Bus.on_run_stopped: the node exits 3 with the message)."""
    from mgrpo_actors.runtime import Bus, EmbeddedNats
    from mgrpo_actors.runtime.store_full import StoreFull

    disk = mount_tmpfs(8 * 1024 * 1024)
    stopped: list[str] = []
    with EmbeddedNats(store_dir=str(disk / "nats")) as server:
        bus = Bus(server.url, run_id="full", store_dir=server.jetstream_dir).connect()
        bus.on_run_stopped = stopped.append
        try:
            bus.add_stream("S", ["s.>"])
            started = time.monotonic()
            with pytest.raises(StoreFull) as raised:
                for _ in range(100):  # 10 MB: more than 75 % of 8
                    bus.js_publish("s.x", b"x" * 100_000)
            assert time.monotonic() - started < 10  # answered, not timed out
        finally:
            bus.close()
    assert str(raised.value).startswith(
        f"the NATS server's JetStream store is full: no space left within its storage limit in {disk / 'nats' / 'js'} "
        "(nats-server: insufficient resources, err_code 10023, on a publish to s.x)"
    )
    assert stopped == [str(raised.value)]


def test_a_store_whose_disk_fills_stops_the_run_naming_it_and_keeps_what_it_had(mount_tmpfs):
    """The disk full before the server's limit: nats-server does not answer the write at all; the publish's timeout
    on a device without room is the full store, for a stream publish and a KV put alike. Restarted on the same store
    once space is back, the server has every message it acknowledged, and takes new ones."""
    from mgrpo_actors.runtime import Bus, EmbeddedNats
    from mgrpo_actors.runtime.store_full import StoreFull

    disk = mount_tmpfs(16 * 1024 * 1024)
    stopped: list[str] = []
    with EmbeddedNats(store_dir=str(disk / "nats")) as server:
        bus = Bus(server.url, run_id="full", store_dir=server.jetstream_dir).connect()
        bus.on_run_stopped = stopped.append
        try:
            bus.add_stream("S", ["s.>"])
            kv = bus.kv("full-state")
            acked = [bus.js_publish("s.x", f"before {i}".encode() * 1000) for i in range(20)]
            filler = _fill(disk)
            with pytest.raises(StoreFull) as raised:
                for i in range(50):
                    acked.append(bus.js_publish("s.x", f"after {i}".encode() * 1000, timeout_s=1.0))
            with pytest.raises(StoreFull) as kv_raised:
                for i in range(50):
                    kv.put(f"k{i}", b"v" * 100_000)
        finally:
            bus.close()
    store = disk / "nats" / "js"
    assert str(raised.value) == (
        f"the NATS server's JetStream store is full: no space left on device in {store} "
        "(a publish to s.x got no answer); free space there and continue with --resume"
    )
    assert str(kv_raised.value).startswith(
        f"the NATS server's JetStream store is full: no space left on device in {store}"
    )
    assert stopped == [str(raised.value)]  # the run stopped once
    filler.unlink()
    with EmbeddedNats(store_dir=str(disk / "nats")) as server, Bus(server.url, run_id="full") as bus:
        assert bus.stream_info("S").state.messages == len(acked)  # every acknowledged message is there
        assert bus.js_publish("s.x", b"after the space came back") == len(acked) + 1


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else ""


@pytest.mark.timeout(400)
def test_a_run_whose_store_fills_stops_with_one_line_and_resumes_once_space_is_back(mount_tmpfs, tmp_path):
    """`mgrpo run` on a disk that another writer fills mid-run stops within its publish timeout (exit 3, one last
    line on stderr naming the store or the checkpoint that found the disk full, no traceback), not after the stall
    watchdog's 90 minutes; a resume on the still-full disk says so too (exit 2: its server cannot start there); once
    space is back `--resume` finishes the run, every step applied exactly once."""
    import json

    from tests.helpers import REPO, run_script, subprocess_env, venv_script

    disk = mount_tmpfs(64 * 1024 * 1024)
    args = [
        *("run", "--main", "tiny:main", "--sub", "tiny:sub", "--set", "tools.web_entities=150"),
        *("--set", "pipeline.steps=6", "--set", "pipeline.ack_wait_s=5", "--set", f"run.dir={disk}"),
        *("--set", "run.id=full"),
    ]
    out, err = tmp_path / "out.log", tmp_path / "err.log"  # off the disk that fills
    with open(out, "w") as stdout, open(err, "w") as stderr:
        run = subprocess.Popen(
            [str(venv_script("mgrpo")), *args],
            cwd=REPO,
            env=subprocess_env(),
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 200
            # at the start of step 2's rollouts: its trajectories are the first writes to find the disk full
            while "step 2: 2 queries" not in out.read_text() and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            filler = _fill(disk)
            filled = time.monotonic()
            code = run.wait(timeout=120)
            took_s = time.monotonic() - filled
        finally:
            if run.poll() is None:
                run.kill()
    store = disk / "full" / "nats" / "js"
    said = err.read_text()
    assert code == 3, out.read_text()[-2000:] + said[-3000:]
    assert took_s < 60, took_s  # the publish timeout (5 s) and the stop, measured 12 s
    # The first write to find the disk full stops the run: the store's (a publish), or a learner's checkpoint on
    # the same disk (the server may acknowledge a step's trajectories before it writes them out).
    stopped = _last_line(said)
    assert stopped.startswith(
        f"mgrpo-node: error: run stopped: the NATS server's JetStream store is full: no space left on device in "
        f"{store} ("
    ) or (
        stopped.startswith("mgrpo-node: error: run stopped: no space left on device: checkpoint step")
        and f"not written to {disk}/" in stopped
    ), said[-3000:]
    assert stopped.endswith("; free space there and continue with --resume"), said[-3000:]
    assert "Traceback" not in said + out.read_text()

    full = run_script("mgrpo", *args, "--resume", timeout_s=120)
    assert full.returncode == 2, full.stdout[-2000:] + full.stderr[-3000:]
    assert _last_line(full.stderr) == (
        f"mgrpo-node: error: no space left on device: the embedded nats-server's store not written to {store.parent}"
    )
    assert "Traceback" not in full.stderr + full.stdout

    filler.unlink()
    done = run_script("mgrpo", *args, "--resume", timeout_s=230)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((disk / "full" / "summary.json").read_text())
    assert [row["step"] for row in summary["steps"]] == list(range(6)), summary["steps"]
    assert [row["main_version"] for row in summary["steps"]] == [float(step + 1) for step in range(6)]
    for row in summary["steps"]:  # B = K = 2: every step's 4 rollouts, none lost or counted twice
        assert sum(n for _, n in row["questions"].values()) == 4, row["questions"]
