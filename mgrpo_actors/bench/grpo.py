"""`mgrpo bench grpo`: seconds per step and generated tokens per second of plain single-turn GRPO through
the whole pipeline, on a stated configuration (issue 10), so it can be compared with other GRPO
trainers on identical work; each step is split into generation, scoring, learner and messaging.

The configuration is deploy/configs/grpo.yaml's (GRPO_JOB; a test keeps the two equal): a Qwen2-style
model (hidden 128, 4 layers, 4 heads, intermediate 384, a byte-level BPE vocabulary of 512 trained
locally; preset tiny:grpo), 4 prompts × 8 completions × at most 32 new tokens per step at temperature
1, the single agent with no tools and one turn, numeric-match scoring, one AdamW step per batch (the
whole batch in one forward/backward), no KL. The bench adds: the model warmed up on the answer format
(mgrpo_actors/bench/grpo_model.py says why: otherwise no reward differs and the learner never steps),
a generated copy of the arithmetic prompts, no checkpoints (other trainers' step times hold none).

It runs the job in this process on an embedded nats-server (controller, single agent, main aligner,
main learner), measured exactly as `mgrpo bench steps` is (mgrpo_actors/bench/steps.py `measure`: the phase
recorder, step windows from the controller's events, every instant counted once), then groups the
categories: generation = `generate`; scoring = `score`; learner = `learn` (forward, backward, optimizer
step) + `weights` (publish, fetch and load the new weights) + `align` (advantages, the batch) +
`checkpoint`; messaging = the rest (NATS and JetStream round trips, serialisation, the actors' own
Python work, waiting). Generated tokens are the completions' tokens (the main batch's loss tokens).

Beside it, TRL's GRPOTrainer on identical work (mgrpo_actors/bench/trl_peer.py, in a virtual environment
of its own, installed on first use; skipped, saying why, when it cannot be installed; with `--quick`
only when it is installed already): the same model directory, prompts, reward rule, stop ids,
generation budget, temperature, batch shape, lr and optimizer, one optimizer step per batch, the same
torch thread count. Both figures are medians of s/step without the warm-up step (ours: the step
windows; TRL's: one step's end to the next); target ours / TRL ≤ 1.0×, aim 0.7×.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from mgrpo_actors.bench.grpo_model import WARMUP, bench_model_dir
from mgrpo_actors.bench.step_split import OTHER, StepSplit
from mgrpo_actors.bench.steps import measure
from mgrpo_actors.bench.trl_peer import PeerSpec, run_peer, trl_python, venv_dir
from mgrpo_actors.cli.composition import Composition
from mgrpo_actors.envs.arithmetic import arithmetic_questions
from mgrpo_actors.envs.dataset import write_questions
from mgrpo_actors.log import quiet_libraries
from mgrpo_actors.models.tiny import FORMAT_TOKENS, TINY_PRESETS

__all__ = ["BENCH_ONLY", "GROUPS", "GRPO_JOB", "group_seconds", "print_configuration", "print_results", "run"]

# deploy/configs/grpo.yaml as overrides (the model and the dataset are the bench's own, added by `run`).
GRPO_JOB = (
    "run.method=single-agent",
    "agents.main.tools=[]",
    "agents.main.max_turns=1",
    "agents.main.max_new_tokens_per_turn=32",
    "agents.main.temperature=1.0",
    "agents.correct_judge=numeric-match",
    "pipeline.queries_per_step=4",
    "pipeline.rollouts_per_query=8",
    "learners.main.micro_batch_samples=32",
    "algo.objective.kl_coef=0.0",
)
BENCH_ONLY = ("learners.main.checkpoint_every=0",)
RUN_ID = "bench-grpo"
STEPS, QUICK_STEPS = 9, 2  # 9: the median of 8 steps after the warm-up step
TRL_QUICK_STEPS = 3
TARGET_RATIO, AIM_RATIO = 1.0, 0.7  # ours / TRL, s/step
# The step's categories (bench/step_split.py), grouped as the issue names them.
GROUPS = {
    "generation": ("generate",),
    "scoring": ("score",),
    "learner": ("learn", "weights", "align", "checkpoint"),
    "messaging": (OTHER,),
}
LABELS = {"generation": "gen", "scoring": "score", "learner": "learner", "messaging": "msg"}


def group_seconds(split: StepSplit) -> dict[str, float]:
    """The step's seconds per group; they add up to its wall time, as the categories do."""
    return {group: sum(split.seconds[c] for c in categories) for group, categories in GROUPS.items()}


def run(composition: Composition, quick: bool = False) -> dict[str, Any]:
    """`mgrpo bench grpo`: measure and print; `quick` runs 2 steps instead of 6."""
    quiet_libraries()
    console = Console(highlight=False)
    steps = QUICK_STEPS if quick else STEPS
    console.print(
        f"grpo bench: plain single-turn GRPO for {steps} steps through the pipeline (controller, single agent, "
        "main aligner, main learner; an embedded nats-server), in this process…",
        markup=False,
    )
    model_dir = bench_model_dir()  # the first time: the warm-up (~20 s on one core), then cached
    with tempfile.TemporaryDirectory(prefix="mgrpo-bench-grpo-data-") as data_dir:
        dataset = Path(data_dir) / "arithmetic.jsonl"
        write_questions(dataset, arithmetic_questions(200))  # the same questions as deploy/data/arithmetic.jsonl
        overrides = [f"agents.main.model={model_dir}", f"pipeline.dataset={dataset}", *BENCH_ONLY]
        results = measure(composition, steps, overrides, job=GRPO_JOB, run_id=RUN_ID)
        if results["exit_code"] != 0:
            raise RuntimeError(f"the job failed (exit {results['exit_code']})")
        print_configuration(results, Path(model_dir), console)
        print_results(results, console)
        results["trl"] = _trl(results, Path(model_dir), Path(data_dir), quick, console)
    print_comparison(results, console)
    return results


def _median_s_per_step(results: dict[str, Any]) -> float | None:
    splits: list[StepSplit] = results["splits"]
    steady = splits[1:] or splits
    return statistics.median(s.wall for s in steady) if steady else None


def peer_spec(results: dict[str, Any], model_dir: Path, steps: int) -> PeerSpec:
    """The work of our job, for TRL: its model, prompts, stop ids, sampling, batch shape and optimizer."""
    from transformers import GenerationConfig

    from mgrpo_actors.agents.episode import action_stop_ids
    from mgrpo_actors.agents.prompts import PLAIN_PROMPT
    from mgrpo_actors.engines.eos import eos_token_ids
    from mgrpo_actors.models.loader import load_tokenizer

    config = results["config"]
    agent, learner, pipeline = config.agents.main, config.learners.main, config.pipeline
    tokenizer = load_tokenizer(model_dir)
    stop = eos_token_ids(tokenizer, GenerationConfig.from_pretrained(model_dir))  # what our engine stops on
    if agent.stop_after_action:
        stop |= set(action_stop_ids(tokenizer))
    return PeerSpec(
        model_dir=str(model_dir),
        system_prompt=agent.system_prompt or PLAIN_PROMPT,
        questions=[{"question": q.question, "answer": str(q.answer)} for q in arithmetic_questions(200)],
        prompts_per_step=pipeline.queries_per_step,
        completions_per_prompt=pipeline.rollouts_per_query,
        max_new_tokens=agent.max_new_tokens_per_turn,
        stop_token_ids=sorted(stop),
        temperature=agent.temperature,
        top_p=agent.top_p,
        top_k=agent.top_k,
        lr=learner.lr,
        weight_decay=learner.weight_decay,
        max_grad_norm=learner.max_grad_norm,
        steps=steps,
        # The most threads any part of ours computes with (the learner: learners.main.torch_threads, by default
        # every core; the engine: agents.torch_threads), so TRL is never given fewer cores than we use.
        threads=max(config.agents.torch_threads, learner.threads()),
    )


def _trl(results: dict[str, Any], model_dir: Path, work: Path, quick: bool, console: Console) -> dict[str, Any]:
    """TRL's GRPOTrainer on the same work: its figures, or {"skipped": why}."""
    if quick and not (venv_dir() / ".complete").exists():
        return {"skipped": f"--quick does not install TRL (run `mgrpo bench grpo` once: it builds {venv_dir()})"}
    if trl_python(lambda text: console.print(text, markup=False))[0] is None:
        return {"skipped": trl_python()[1]}
    steps = TRL_QUICK_STEPS if quick else results["steps"]
    console.print(f"TRL: GRPOTrainer on the same work for {steps} steps, in its own environment…", markup=False)
    return run_peer(peer_spec(results, model_dir, steps), work / "trl-spec.json", say=console.print)


def _figure(value: float | None, spec: str) -> str:
    return "?" if value is None else format(value, spec)


def print_comparison(results: dict[str, Any], console: Console) -> None:
    ours, trl = _median_s_per_step(results), results.get("trl") or {"skipped": "not run"}
    if ours is None:
        return
    steady = len(results["splits"]) - 1 or 1
    console.print(f"ours: {ours:.3f} s/step (median of {steady} steps after the warm-up step)", markup=False)
    if "skipped" in trl:
        console.print(f"[yellow]TRL comparison skipped: {trl['skipped']}[/]")
        return
    ratio = ours / trl["s_per_step"]
    verdict = "[green]OK[/]" if ratio <= TARGET_RATIO else "[red bold]MISS[/]"
    aim = "met" if ratio <= AIM_RATIO else "not met"
    tokens, reward = trl.get("mean_completion_tokens"), trl.get("mean_reward")
    console.print(
        f"TRL {trl['trl']} GRPOTrainer (transformers {trl['transformers']}, torch {trl['torch']}, "
        f"{trl['threads']} thread(s)): {trl['s_per_step']:.3f} s/step (median of {len(trl['steps']) - 1} steps after "
        f"the first; {_figure(tokens, '.1f')} completion tokens a row, mean reward {_figure(reward, '.3f')})",
        markup=False,
    )
    console.print(f"ours / TRL: {ratio:.2f}× s/step; target ≤ {TARGET_RATIO:g}×: {verdict}; aim {AIM_RATIO:g}×: {aim}")


def print_configuration(results: dict[str, Any], model_dir: Path, console: Console) -> None:
    config = results["config"]
    agent, learner, pipeline = config.agents.main, config.learners.main, config.pipeline
    shape = json.loads((model_dir / "config.json").read_text())
    console.print(
        f"model: {shape['architectures'][0]}, hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, "
        f"{shape['num_attention_heads']} heads ({shape['num_key_value_heads']} KV), "
        f"intermediate {shape['intermediate_size']}, {shape['vocab_size']} ids "
        f"(byte-level BPE of {TINY_PRESETS['grpo'].vocab_size} trained locally + {len(FORMAT_TOKENS)} format tags), "
        f"{agent.dtype} on {agent.device}, warmed up {WARMUP.steps} steps on the answer format",
        markup=False,
    )
    console.print(
        f"step: {pipeline.queries_per_step} prompts × {pipeline.rollouts_per_query} completions "
        f"× ≤ {agent.max_new_tokens_per_turn} new tokens, temperature {agent.temperature:g}, no tools, "
        f"{agent.max_turns} turn, {config.agents.correct_judge} scoring; one AdamW step per batch "
        f"(lr {learner.lr:g}, micro-batch {learner.micro_batch_samples}, {learner.device} {learner.dtype}), "
        f"KL coefficient {config.algo.objective.kl_coef:g}, no checkpoints; "
        f"{config.agents.torch_threads} torch thread(s) generating (agents.torch_threads), "
        f"{learner.threads()} learning (learners.main.torch_threads); one process",
        markup=False,
    )


def _tokens(results: dict[str, Any], step: int) -> float:
    """The completions' tokens of `step` (its main batch's loss tokens)."""
    return float(results["batches"].get(step, {}).get("main", {}).get("tokens", 0.0))


def _row(label: str, split: StepSplit, tokens: float, trained: str) -> list[str]:
    groups = group_seconds(split)
    rate = tokens / split.wall if split.wall > 0 else 0.0
    return [label, f"{split.wall:.3f}", f"{tokens:.0f}", f"{rate:.1f}", *(f"{groups[g]:.3f}" for g in GROUPS), trained]


def print_results(results: dict[str, Any], console: Console) -> None:
    splits: list[StepSplit] = results["splits"]
    if not splits:
        console.print("[red]no step finished: nothing measured[/]")
        return
    table = Table(
        title="seconds per step, each instant counted once (* warm-up)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for column in ("step", "s/step", "tokens", "tok/s", *(LABELS[g] for g in GROUPS), "trained"):
        table.add_column(column, justify="right")
    trained = {step: sides.get("main", 0) for step, sides in results["trained"].items()}
    for split in splits:
        table.add_row(
            *_row(
                f"{split.step}{'*' if split.step == 0 else ''}",
                split,
                _tokens(results, split.step),
                str(trained.get(split.step, "-")),
            )
        )
    steady = splits[1:] or splits  # step 0 holds the warm-up (first generation, DeepSpeed's first step)
    mean: StepSplit = results["mean"] or splits[0]
    tokens = sum(_tokens(results, s.step) for s in steady) / len(steady)
    label = f"mean {steady[0].step}–{steady[-1].step}" if len(steady) > 1 else f"step {steady[0].step}"
    table.add_row(*_row(label, mean, tokens, ""), style="bold")
    groups = group_seconds(mean)
    table.add_row("share", "100%", "", "", *(f"{groups[g] / mean.wall:.1%}" if mean.wall else "" for g in GROUPS), "")
    console.print(table)
    console.print(
        "tokens: the completions' tokens; tok/s: tokens / s/step; gen: rollout generation; "
        "score: judging the completions (R_M); learner: forward, backward and optimizer step, "
        "new weights published, fetched and loaded, advantages and batch; msg (messaging): the rest "
        "(NATS and JetStream round trips, serialisation, the actors' own work, waiting); "
        "trained: samples the learner trained on",
        markup=False,
    )
    console.print(
        "each alone (may overlap), mean: " + ", ".join(f"{k} {mean.busy[k]:.3f} s" for k in mean.busy), markup=False
    )
    generation = groups["generation"]
    which = "steps after step 0 (warm-up)" if results["mean"] is not None else "step 0 only, warm-up included"
    console.print(
        f"plain GRPO: {mean.wall:.3f} s/step, {tokens / mean.wall:.1f} generated tokens/s "
        f"({tokens:.0f} tokens a step; generation alone {tokens / generation if generation else 0:.1f} tokens/s); "
        f"mean of {which}",
        markup=False,
    )
