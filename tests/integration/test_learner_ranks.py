"""A learner with several ranks (real gloo process groups, tiny model, fp32, DeepSpeed on CPU): two ranks
give the same update as one rank on the same batches, rank 1 following rank 0 through ranks.py's
channel (never NATS).

The batches: one with an odd number of trainable rows in two sampling settings (the ranks get
different numbers of micro-batches, so one runs zero-weight stand-ins), one with a single trainable
row (rank 1 has no rows at all) and one with no signal (no step on either rank). Rank 1 starts from
perturbed weights: DeepSpeed broadcasts rank 0's at start, as a restarted rank 0's resumed weights must
reach its followers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from mgrpo_actors.algo.advantages import group_advantages
from mgrpo_actors.algo.config import AdvantageConfig, ObjectiveConfig
from mgrpo_actors.alignment.batch_rows import BatchRow, placeholder_row, rows_to_batch
from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.learner.micro_batches import micro_batches, trainable_rows
from mgrpo_actors.models.loader import load_model
from protocols import AlignedBatch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SPEC = "tiny:main"
MICRO = 2
LR = 5e-4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _row(model, rng: np.random.Generator, name: str, advantage: float, temperature: float = 1.0) -> BatchRow:  # noqa: ANN001
    """A sample of random tokens whose behaviour logprobs are the model's own, nudged (ratios near 1, some clipped)."""
    n = int(rng.integers(6, 14))
    ids = rng.integers(3, model.config.vocab_size, n).astype(np.int32)
    prompt = int(rng.integers(1, 4))
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids[None].astype(np.int64))).logits[0, :-1] / temperature
        own = (
            torch.log_softmax(logits.float(), -1)
            .gather(-1, torch.from_numpy(ids[1:, None].astype(np.int64)))[:, 0]
            .numpy()
        )
    logprobs = np.concatenate([[0.0], own + rng.normal(0, 0.15, n - 1)]).astype(np.float32)
    mask = np.array([0] * prompt + [1] * (n - prompt), np.uint8)
    return BatchRow(name, "original", ids, mask, logprobs, advantage, 1.0, 0.0, 0, temperature=temperature)


def _batches(model) -> list[AlignedBatch]:  # noqa: ANN001
    rng = np.random.default_rng(7)
    uneven = [_row(model, rng, f"q/a/r{i}", float(rng.normal()), 0.7 if i == 0 else 1.0) for i in range(7)]
    uneven += [placeholder_row("q/-/r7", "failed"), _row(model, rng, "q/a/r8", 0.0)]  # no loss, no gradient
    single = [_row(model, rng, "q/b/r0", 1.5), placeholder_row("q/-/r1", "failed"), _row(model, rng, "q/b/r2", 0.0)]
    silent = [placeholder_row(f"q/-/r{i}", "placeholder") for i in range(3)]
    return [rows_to_batch("r", "main", step, f"b{step}", rows) for step, rows in enumerate((uneven, single, silent))]


def _sub_batch(model, run_id: str) -> AlignedBatch:  # noqa: ANN001
    """Step 0's sub batch as the sub aligner builds it for pipeline_config's B = 3, K = 2, D = 2: 12 samples in 3
    groups of 4 with the group advantages of their rewards (one group without signal), one a failed placeholder;
    the learner's checks (learner/batch_checks.py) pass it. 7 samples carry an advantage."""
    rng = np.random.default_rng(7)
    rewards = [[1.0, 0.0, 0.2, None], [0.3, 0.3, 0.3, 0.3], [0.9, 0.1, 0.1, 0.1]]
    rows = []
    for g, values in enumerate(rewards):
        real = [r for r in values if r is not None]
        adv = group_advantages(np.array([real]), np.ones((1, len(real)), dtype=bool), AdvantageConfig())[0]
        for i, reward in enumerate(values):
            if reward is None:
                rows.append(placeholder_row(f"q{g}/-/r{i}/-#0", "failed"))
                continue
            row = _row(model, rng, f"q{g}/a/r{i}/c#0", float(adv[i]), 0.7 if not rows else 1.0)
            rows.append(dataclasses.replace(row, reward=reward, group=g))
    return rows_to_batch(run_id, "sub", 0, f"{run_id}-sub-step0", rows, d=2)


def _rank_main(rank: int, world: int, port: int, stage: int, batches: list[AlignedBatch], out: str) -> None:
    """One rank of a learner: rank 0 leads (applies, gathers, checkpoints, stops), the others follow."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    from mgrpo_actors.learner.checkpoints import Checkpoints
    from mgrpo_actors.learner.ranks import RankChannel, follow, lead, stop_followers
    from mgrpo_actors.learner.trainer import PolicyTrainer

    model, tokenizer = load_model(SPEC)
    if rank > 0:  # rank 0's weights must win (DeepSpeed broadcasts them when the engine starts)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05)
    cfg = LearnerConfig(zero_stage=stage, lr=LR, micro_batch_samples=MICRO)
    trainer = PolicyTrainer(model, tokenizer.pad_token_id, cfg, ObjectiveConfig())
    out_dir = Path(out)
    if rank > 0:
        applied = follow(trainer, RankChannel())
        state = trainer.module.state_dict() if stage < 3 else {}
        torch.save({"applied": applied, "state": state}, out_dir / f"follower{rank}.pt")
        return
    lead(trainer)
    results = []
    for batch in batches:
        stats = trainer.apply(batch)
        results.append(
            {"stats": stats.as_dict(), "state": {k: v.clone() for k, v in trainer.full_state_dict().items()}}
        )
    Checkpoints(out_dir / "checkpoints").save(trainer, tokenizer, "t0", {"step": len(batches) - 1})
    stop_followers(trainer)
    torch.save(results, out_dir / "lead.pt")


def _launch(world: int, stage: int, batches: list[AlignedBatch], out: Path) -> tuple[list[dict], float]:
    import torch.multiprocessing as mp

    out.mkdir(parents=True)
    started = time.perf_counter()
    mp.start_processes(
        _rank_main, args=(world, _free_port(), stage, batches, str(out)), nprocs=world, join=True, start_method="spawn"
    )
    return torch.load(out / "lead.pt"), time.perf_counter() - started


@pytest.fixture(scope="module")
def batches() -> list[AlignedBatch]:
    return _batches(load_model(SPEC)[0])


def _shard_micro_batches(batch: AlignedBatch) -> list[int]:
    """Micro-batches of rank 0 and rank 1 of two (the trainer's sharding: every other trainable row)."""
    rows = trainable_rows(batch, skip_zero_advantage=True)
    return [len(micro_batches(batch, MICRO, 0, rows[r::2])) if rows[r::2] else 0 for r in range(2)]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_the_batches_exercise_uneven_and_empty_shards(batches):
    """The fixture's own check: the ranks get different micro-batch counts, then rank 1 gets none."""
    first, second = (_shard_micro_batches(b) for b in batches[:2])
    assert first[0] != first[1] and second == [1, 0], (first, second)
    assert not trainable_rows(batches[2])


@pytest.mark.parametrize("stage", [2, 0, 3])
def test_two_ranks_give_the_same_update_as_one(batches, tmp_path, stage):
    one, one_s = _launch(1, stage, batches, tmp_path / "one")
    two, two_s = _launch(2, stage, batches, tmp_path / "two")
    diffs = [_max_diff(a["state"], b["state"]) for a, b in zip(one, two)]
    initial = {k: v for k, v in load_model(SPEC)[0].state_dict().items() if k in one[0]["state"]}
    moved = [_max_diff(s["state"], prev) for s, prev in zip(one, [initial, *(s["state"] for s in one)])]
    print(
        f"\nZeRO-{stage}: max |w(2 ranks) - w(1 rank)| after each step {diffs}; max |Δw| per step {moved}; "
        f"1 rank {one_s:.1f} s, 2 ranks {two_s:.1f} s"
    )
    assert max(diffs) <= 1e-5, diffs
    assert moved[0] > LR / 2 and moved[1] > LR / 2 and moved[2] == 0, moved  # the batch with no signal took no step
    for step, (a, b) in enumerate(zip(one, two)):  # rank 0 reports the whole batch's figures
        for name in ("loss", "tokens", "samples", "clip_fraction", "ratio_mean", "approx_kl", "grad_norm"):
            assert b["stats"][name] == pytest.approx(a["stats"][name], rel=1e-4, abs=1e-6), (step, name)
    assert [b["stats"]["micro_batches"] for b in two] == [sum(_shard_micro_batches(b)) for b in batches]

    follower = torch.load(tmp_path / "two" / "follower1.pt")
    assert follower["applied"] == len(batches)  # rank 1 applied every batch rank 0 shared, then stopped
    for name, tensor in follower["state"].items():  # its replica is rank 0's (under ZeRO-3 it holds a partition)
        assert torch.equal(tensor, two[-1]["state"][name]), name
    checkpoint = tmp_path / "two" / "checkpoints" / "t0"
    saved = {p.name for p in checkpoint.iterdir()}
    if stage > 0:  # each rank wrote its own optimizer partition
        assert {f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(2)} <= saved, saved
    assert json.loads((checkpoint / "hf" / "config.json").read_text())["model_type"] == "llama"


def test_a_two_rank_learner_under_torchrun_applies_a_batch_with_rank_1_off_nats(
    nats_server, tmp_path, make_bus, run_id
):
    """`torchrun --nproc-per-node 2 -m actors.node --role sub-learner`: rank 0 is the node on NATS, rank 1
    follows it (never connecting); the batch is applied, checkpointed by both ranks, and both exit 0
    once the run is finished."""
    from protocols import Event
    from tests.helpers import start_script, stop_process
    from tests.pipeline_helpers import EventLog, pipeline_config

    bus = make_bus("test")
    events = EventLog(bus)
    learner = {"lr": LR, "zero_stage": 2, "micro_batch_samples": MICRO}
    config = pipeline_config(tmp_path, run_id, learners={"sub": learner}, log={"level": "info", "json": True})
    out = open(tmp_path / "torchrun.log", "w")  # noqa: SIM115 - the process owns it
    args = (
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "actors.node",
        "--role",
        "sub-learner",
        "--config",
        str(config),
        "--nats",
        nats_server.url,
        "--until-finished",
    )
    proc = start_script("torchrun", *args, env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])}, stdout=out)
    log = lambda: (tmp_path / "torchrun.log").read_text()[-3000:]  # noqa: E731
    try:
        events.wait_for("node.started", timeout_s=90, describe=log)
        batch = _sub_batch(load_model("tiny:sub")[0], run_id)
        bus.js_publish(bus.subjects.batches("sub"), batch, msg_id=f"{batch.batch_id}#0")
        learned = events.wait_for("sub.learned", timeout_s=60, describe=log)
        bus.publish(bus.subjects.events, Event(kind="run.finished", message="test over"))
        assert proc.wait(timeout=60) == 0, log()
    finally:
        stop_process(proc)
    output = (tmp_path / "torchrun.log").read_text()
    assert learned.data["samples"] == 7 and learned.data["version"] == 1, learned.data
    assert '"learner rank stopped"' in output and '"applied": 1' in output, output[-3000:]
    assert output.count('"node started"') == 1  # rank 1 never started a node on the bus
    checkpoint = tmp_path / "runs" / run_id / "checkpoints" / "sub" / "step0"
    assert {f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(2)} <= {p.name for p in checkpoint.iterdir()}


def test_under_a_launcher_ranks_above_0_follow_and_a_node_runs_one_learner_role(monkeypatch):
    from actors.node import follower_side, main

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert follower_side(["sub-learner"]) == "sub"
    monkeypatch.setenv("RANK", "0")
    assert follower_side(["main-learner"]) is None  # rank 0 is the node on NATS
    with pytest.raises(ValueError, match="one learner role"):
        follower_side(["sub-learner", "tool"])
    assert main(["--role", "tool"]) == 2  # refused before connecting
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert follower_side(["tool"]) is None
