"""A learner on 2 GPUs (DeepSpeed on nccl, one rank per GPU) against the same learner on 1, on the same batches
(deploy/gpu/check.sh runs it where 2 GPUs are visible): the largest weight difference after the steps and each
run's wall time, as one JSON line. The batches are random token rows whose behaviour logprobs are the model's own,
nudged (as tests/integration/test_learner_ranks.py builds them on CPU with gloo).

    python deploy/gpu/ranks.py --model tiny:main32 --stage 2
    python deploy/gpu/ranks.py --device cpu       # the same on gloo: a check of the script itself, no GPU needed
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batches(spec: str, steps: int, rows: int):
    from mgrpo_actors.alignment.batch_rows import BatchRow, rows_to_batch
    from mgrpo_actors.models.loader import load_model

    model, _ = load_model(spec)
    rng = np.random.default_rng(7)
    batches = []
    for step in range(steps):
        batch_rows = []
        for i in range(rows):
            n = int(rng.integers(8, 24))
            ids = rng.integers(3, model.config.vocab_size, n).astype(np.int32)
            with torch.no_grad():
                logits = model(input_ids=torch.from_numpy(ids[None].astype(np.int64))).logits[0, :-1]
                own = torch.log_softmax(logits, -1).gather(-1, torch.from_numpy(ids[1:, None].astype(np.int64)))[:, 0]
            logprobs = np.concatenate([[0.0], own.numpy() + rng.normal(0, 0.15, n - 1)]).astype(np.float32)
            mask = np.array([0, 0] + [1] * (n - 2), np.uint8)
            advantage = float(rng.normal())
            batch_rows.append(BatchRow(f"q/a/r{i}", "original", ids, mask, logprobs, advantage, 1.0, 0.0, 0))
        batches.append(rows_to_batch("r", "main", step, f"b{step}", batch_rows))
    return batches


def _rank(rank: int, world: int, port: int, spec: str, stage: int, dtype: str, device: str, batches, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    if device == "cuda":
        torch.cuda.set_device(rank)  # one GPU per rank; the trainer's process group is nccl on "cuda"
    else:
        torch.set_num_threads(1)  # gloo ranks share the CPU cores
    from mgrpo_actors.algo.config import ObjectiveConfig
    from mgrpo_actors.config.learner import LearnerConfig
    from mgrpo_actors.learner.ranks import RankChannel, follow, lead, stop_followers
    from mgrpo_actors.learner.trainer import PolicyTrainer
    from mgrpo_actors.models.loader import load_model

    model, tokenizer = load_model(spec)
    cfg = LearnerConfig(device=device, dtype=dtype, zero_stage=stage, lr=5e-4, micro_batch_samples=2)
    trainer = PolicyTrainer(model, tokenizer.pad_token_id, cfg, ObjectiveConfig())
    if rank > 0:
        follow(trainer, RankChannel())
        return
    lead(trainer)
    for batch in batches:
        trainer.apply(batch)
    state = {k: v.detach().float().cpu() for k, v in trainer.full_state_dict().items()}
    stop_followers(trainer)
    torch.save(state, Path(out) / f"world{world}.pt")


def _launch(world: int, args, batches, out: str) -> float:
    import torch.multiprocessing as mp

    started = time.perf_counter()
    mp.start_processes(
        _rank,
        args=(world, _free_port(), args.model, args.stage, args.dtype, args.device, batches, out),
        nprocs=world,
        join=True,
        start_method="spawn",
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny:main32")
    parser.add_argument("--stage", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=8)
    args = parser.parse_args()
    batches = _batches(args.model, args.steps, args.rows)
    with tempfile.TemporaryDirectory() as out:
        seconds = {world: round(_launch(world, args, batches, out), 2) for world in (1, 2)}
        one, two = (torch.load(Path(out) / f"world{w}.pt") for w in (1, 2))
    diff = max(float((one[k] - two[k]).abs().max()) for k in one)
    print(
        json.dumps(
            {"ranks_max_weight_diff": diff, "seconds_1_rank": seconds[1], "seconds_2_ranks": seconds[2], **vars(args)}
        )
    )


if __name__ == "__main__":
    main()
