"""Benchmark: a learner step (PolicyTrainer.apply: the DeepSpeed engine, one rank, the config's ZeRO stage)
against plain torch on the same model and micro-batch.

Plain torch: `model(input_ids, attention_mask).logits`, the sampling distribution's logprobs of the
targets (engines/logprobs.py token_log_probs), the clipped objective (algo/objective.py), backward,
gradient clipping at learners.<side>.max_grad_norm and one torch.optim.AdamW step: what a learner has
to do, written directly. Learner: `PolicyTrainer.apply` of the same samples as an AlignedBatch, one
micro-batch (micro_batch_samples = the samples), which adds turning the batch into tensors, the
DeepSpeed engine's forward and backward, its optimizer step and the statistics. Both run on a copy of
the same model with the same number of torch threads (learners.<side>.torch_threads: every core this
process may use), alternating, one warm-up step each; the figures are medians.

Cases: the bench model of `mgrpo bench grpo` (tiny:grpo warmed up, bench/grpo_model.py) with 32 samples
× 64 tokens, and SmolLM2-135M-Instruct with one sample × 1,000 tokens; each sample's first quarter is
prompt (off the loss mask), its behaviour logprobs the model's own. Target: learner ≤ 1.2× plain torch.
quick=True: shorter samples, two timed steps.

`peak_rss(...)` (not part of `run`: the old path needs ~21 GB) measures a learner step's peak memory in
a fresh process: `python -m mgrpo_actors.bench.learner --memory smollm2 4 2600 [chunk] [checkpointing 0|1]`.
`kl_cost(...)` (not part of `run` either) times a learner step with the KL term to the frozen reference on
against off: `python -m mgrpo_actors.bench.learner --kl smollm2 1 1000 [steps]`. A micro-batch's shared prefix
computed once against every row whole: `python -m mgrpo_actors.bench.learner --prefix smollm2 4 480 650 [steps]`.
"""

from __future__ import annotations

import copy
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.algo.objective import clipped_policy_loss
from mgrpo_actors.alignment.batch_rows import BatchRow, rows_to_batch
from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.engines.logprobs import token_log_probs
from mgrpo_actors.learner.micro_batches import micro_batches
from protocols import AlignedBatch

__all__ = ["TARGET_RATIO", "LearnerCase", "kl_cost", "peak_rss", "run"]

TARGET_RATIO = 1.2  # learner step / plain torch step


@dataclass(frozen=True)
class LearnerCase:
    """One comparison: a model spec ("bench" = the grpo bench model) and its micro-batch."""

    name: str
    spec: str
    samples: int
    tokens: int
    steps: int  # timed steps per side


FULL = (LearnerCase("tiny:grpo", "bench", 32, 64, 7), LearnerCase("SmolLM2-135M", "smollm2", 1, 1000, 5))
QUICK = (LearnerCase("tiny:grpo", "bench", 8, 32, 2), LearnerCase("SmolLM2-135M", "smollm2", 1, 128, 2))


def _load(spec: str):  # noqa: ANN202
    from mgrpo_actors.models.loader import load_model

    if spec == "bench":
        from mgrpo_actors.bench.grpo_model import bench_model_dir

        spec = str(bench_model_dir())
    return load_model(spec)


def bench_batch(model: torch.nn.Module, samples: int, tokens: int, seed: int = 0, prefix: int = 0) -> AlignedBatch:
    """`samples` rows of `tokens` random ids, the first `prefix` of them the same in every row (a system prompt
    and question every rollout of a group opens with); the first quarter (at least the prefix) is prompt, the
    rest on the loss mask with the model's own logprobs (temperature 1) as behaviour logprobs; advantages
    alternate ±1."""
    rng = np.random.default_rng(seed)
    vocab = int(model.config.vocab_size)
    shared = rng.integers(3, vocab, prefix).astype(np.int32)
    rows = []
    for i in range(samples):
        ids = rng.integers(3, vocab, tokens).astype(np.int32)
        ids[:prefix] = shared
        with torch.no_grad():
            logits = model(input_ids=torch.from_numpy(ids[None].astype(np.int64))).logits[0, :-1].float()
            own = torch.log_softmax(logits, -1).gather(-1, torch.from_numpy(ids[1:, None].astype(np.int64)))[:, 0]
        logprobs = np.concatenate([[0.0], own.numpy()]).astype(np.float32)
        mask = (np.arange(tokens) >= max(prefix, tokens // 4)).astype(np.uint8)
        advantage = 1.0 if i % 2 == 0 else -1.0
        rows.append(BatchRow(f"q/a/r{i}", "original", ids, mask, logprobs, advantage, 1.0, 0.0, 0, group=0))
    return rows_to_batch("bench", "main", 0, "b0", rows)


class _PlainTorch:
    """The same step written directly with torch: forward, logprobs, objective, backward, clip, AdamW."""

    def __init__(self, model: torch.nn.Module, batch: AlignedBatch, pad_id: int, cfg: LearnerConfig) -> None:
        self.model = model.float().train()
        self.cfg = cfg
        self.objective = ObjectiveConfig()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        (self.mb,) = micro_batches(batch, len(batch.sample_ids), pad_id)
        self.denominator = float(self.mb.loss_mask.sum())

    def step(self) -> None:
        mb = self.mb
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
        logprobs = token_log_probs(logits, mb.targets, mb.sampling)
        loss, _ = clipped_policy_loss(
            logprobs, mb.old_logprobs, mb.advantages, mb.loss_mask, self.objective, global_denominator=self.denominator
        )
        loss.backward()
        if self.cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()


def _time_case(case: LearnerCase) -> dict:
    from mgrpo_actors.learner.trainer import PolicyTrainer

    model, tokenizer = _load(case.spec)
    batch = bench_batch(model, case.samples, case.tokens)
    cfg = LearnerConfig(micro_batch_samples=case.samples)
    threads = cfg.threads()
    torch.set_num_threads(threads)  # plain torch gets what the learner gets (learners.<side>.torch_threads)
    plain = _PlainTorch(copy.deepcopy(model), batch, tokenizer.pad_token_id, cfg)
    trainer = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, ObjectiveConfig())
    times: dict[str, list[float]] = {"plain": [], "learner": []}
    cpu: dict[str, list[float]] = {"plain": [], "learner": []}
    sides = {"plain": plain.step, "learner": lambda: trainer.apply(batch)}
    for i in range(case.steps + 1):  # step 0 of each side is a warm-up
        order = ("plain", "learner") if i % 2 == 0 else ("learner", "plain")
        for side in order:
            started, started_cpu = time.perf_counter(), time.process_time()
            sides[side]()
            if i:
                times[side].append(time.perf_counter() - started)
                cpu[side].append(time.process_time() - started_cpu)
    plain_s, learner_s = (statistics.median(times[side]) for side in ("plain", "learner"))
    plain_cpu, learner_cpu = (statistics.median(cpu[side]) for side in ("plain", "learner"))
    tokens = case.samples * case.tokens
    return {
        "case": case.name,
        "samples": case.samples,
        "tokens": case.tokens,
        "zero_stage": cfg.zero_stage,
        "zero_stage_run": trainer.zero_stage,  # one rank: 0 whatever the config says (trainer.zero_stage)
        "logprob_chunk": trainer.logprob_chunk,
        "threads": threads,
        "plain_s": plain_s,
        "learner_s": learner_s,
        "ratio": learner_s / plain_s,
        # CPU seconds of this process (all its threads): less moved than wall time by other processes' load
        "plain_cpu_s": plain_cpu,
        "learner_cpu_s": learner_cpu,
        "cpu_ratio": learner_cpu / plain_cpu,
        "plain_tokens_per_s": tokens / plain_s,
        "learner_tokens_per_s": tokens / learner_s,
        "steps": case.steps,
    }


def run(quick: bool = False) -> dict:
    """Time both sides on each case, print a table, return the figures (seconds)."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Loading weights" bars would break up the table
    cases = [_time_case(case) for case in (QUICK if quick else FULL)]
    result = {"target_ratio": TARGET_RATIO, "cases": cases, "met": all(c["ratio"] <= TARGET_RATIO for c in cases)}
    _print(result)
    return result


def _print(result: dict) -> None:
    console = Console(width=max(Console().width, 110))
    table = Table(title=f"learner step (DeepSpeed, 1 rank) vs plain torch, target ≤ {TARGET_RATIO}×")
    columns = (
        "case",
        "micro-batch",
        "ZeRO",
        "threads",
        "plain torch s",
        "learner s",
        "ratio",
        "CPU-time ratio",
        "tokens/s",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "case" else "right")
    for c in result["cases"]:
        table.add_row(
            c["case"],
            f"{c['samples']} × {c['tokens']}",
            f"{c['zero_stage']}→{c['zero_stage_run']}",
            str(c["threads"]),
            f"{c['plain_s']:.3f}",
            f"{c['learner_s']:.3f}",
            f"{c['ratio']:.2f}×",
            f"{c['cpu_ratio']:.2f}×",
            f"{c['plain_tokens_per_s']:,.0f} / {c['learner_tokens_per_s']:,.0f}",
        )
    console.print(table)
    verdict = "met" if result["met"] else "NOT met"
    console.print(f"tokens/s: plain torch / learner; target learner ≤ {TARGET_RATIO}× plain torch: {verdict}")


def _memory_child(spec: str, samples: int, tokens: int, chunk: int, checkpointing: bool = False) -> None:
    """In a fresh process: one learner step; prints the peak RSS (bytes) before and after the step as JSON."""
    import resource

    from mgrpo_actors.learner.trainer import PolicyTrainer

    model, tokenizer = _load(spec)
    batch = bench_batch(model, samples, tokens)
    cfg = LearnerConfig(micro_batch_samples=samples, logprob_chunk_tokens=chunk, activation_checkpointing=checkpointing)
    trainer = PolicyTrainer(model, tokenizer.pad_token_id, cfg, ObjectiveConfig())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started = time.perf_counter()
    trainer.apply(batch)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"peak_before_step": before, "peak": peak, "step_s": seconds}))


def peak_rss(
    spec: str, samples: int, tokens: int, chunk: int = LearnerConfig.logprob_chunk_tokens, checkpointing: bool = False
) -> dict:
    """Peak resident memory of a fresh process holding a learner (model, DeepSpeed engine, AdamW) before and
    after one step on `samples` × `tokens` (`chunk`: learners.<side>.logprob_chunk_tokens, 0 = full logits;
    `checkpointing`: learners.<side>.activation_checkpointing)."""
    args = f"{spec!r}, {samples}, {tokens}, {chunk}, {bool(checkpointing)}"
    code = f"from mgrpo_actors.bench.learner import _memory_child; _memory_child({args})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _alternated(trainers: dict, batch: AlignedBatch, steps: int) -> tuple[float, float]:
    """Median seconds of `PolicyTrainer.apply` for trainers "off" and "on", alternating after a warm-up step each."""
    times: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(steps + 1):  # step 0 of each is a warm-up
        for name in ("off", "on") if i % 2 == 0 else ("on", "off"):
            started = time.perf_counter()
            trainers[name].apply(batch)
            if i:
                times[name].append(time.perf_counter() - started)
    return statistics.median(times["off"]), statistics.median(times["on"])


def shared_prefix_cost(spec: str, samples: int, prefix: int, tokens: int, steps: int = 3) -> dict:
    """PolicyTrainer.apply with the micro-batch's shared prefix computed once (learners.<side>.shared_prefix_tokens
    32, learner/shared_prefix.py) against every row whole (0), one micro-batch of `samples` rows of `tokens` ids
    whose first `prefix` are the same, on copies of the same model, alternating after a warm-up; medians."""
    from mgrpo_actors.learner.trainer import PolicyTrainer

    model, tokenizer = _load(spec)
    batch = bench_batch(model, samples, tokens, prefix=prefix)
    trainers = {
        name: PolicyTrainer(
            copy.deepcopy(model),
            tokenizer.pad_token_id,
            LearnerConfig(micro_batch_samples=samples, shared_prefix_tokens=min_tokens),
            ObjectiveConfig(),
        )
        for name, min_tokens in (("off", 0), ("on", 32))
    }
    off_s, on_s = _alternated(trainers, batch, steps)
    return {
        "case": f"{spec} {samples} × {tokens} (prefix {prefix})",
        "dtype": trainers["on"].cfg.dtype,
        "threads": trainers["on"].cfg.threads(),
        "whole_rows_s": off_s,
        "shared_prefix_s": on_s,
        "ratio": on_s / off_s,
        "steps": steps,
    }


def kl_cost(spec: str, samples: int, tokens: int, steps: int = 5, kl_coef: float = 0.01) -> dict:
    """PolicyTrainer.apply with algo.objective.kl_coef > 0 (the reference: the starting weights, one more
    no-grad forward per micro-batch) against kl_coef 0, on copies of the same model and micro-batch, the
    same threads, alternating after a warm-up step each; medians. Also the reference's weights in bytes."""
    from mgrpo_actors.learner.trainer import PolicyTrainer

    model, tokenizer = _load(spec)
    batch = bench_batch(model, samples, tokens)
    cfg = LearnerConfig(micro_batch_samples=samples)
    trainers = {
        name: PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, ObjectiveConfig(kl_coef=coef))
        for name, coef in (("off", 0.0), ("on", kl_coef))
    }
    off_s, on_s = _alternated(trainers, batch, steps)
    reference = trainers["on"].reference.module
    return {
        "case": f"{spec} {samples} × {tokens}",
        "threads": cfg.threads(),
        "kl_off_s": off_s,
        "kl_on_s": on_s,
        "ratio": on_s / off_s,
        "reference_bytes": sum(p.numel() * p.element_size() for p in reference.parameters()),
        "steps": steps,
    }


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--kl":
        spec, samples, tokens, *rest = sys.argv[2:]
        print(kl_cost(spec, int(samples), int(tokens), *(int(x) for x in rest)))
    elif len(sys.argv) > 1 and sys.argv[1] == "--prefix":
        spec, samples, prefix, tokens, *rest = sys.argv[2:]
        print(shared_prefix_cost(spec, int(samples), int(prefix), int(tokens), *(int(x) for x in rest)))
    elif len(sys.argv) > 1 and sys.argv[1] == "--memory":
        spec, samples, tokens, *rest = sys.argv[2:]
        figures = peak_rss(spec, int(samples), int(tokens), *(int(x) for x in rest))
        print({name: f"{value / 2**30:.2f} GiB" if "peak" in name else value for name, value in figures.items()})
    else:
        run(quick="--quick" in sys.argv)
