"""`mgrpo compare`'s results: per method and seed, the per-step rewards (its run's summary.json) and the
validation figures at every evaluated step (`mgrpo eval` reports); per method, the final validation accuracy
over the seeds (mean and 95 % t-interval, evaluation/over_seeds.py); and M-GRPO against each other method,
paired question by question on the final evaluations (evaluation/paired.py; each question's accuracy pooled
over the seeds and their sampled runs). One JSON document and markdown tables."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mgrpo_actors.compare.progress import duration, step_kind
from mgrpo_actors.evaluation.over_seeds import over_seeds
from mgrpo_actors.evaluation.paired import paired_by_id, question_accuracy

__all__ = [
    "REFERENCE",
    "REWARD_KEYS",
    "markdown_table",
    "method_result",
    "method_summary",
    "paired_against",
    "time_line",
    "time_spent",
]

REFERENCE = "m-grpo"  # the method every other is paired against
# Per-step figures kept from a run's summary.json (monitoring/steps.py's rows).
REWARD_KEYS = (
    "step",
    "main_reward_mean",
    "sub_reward_mean",
    "main_correct",
    "main_format_ok",
    "dk_mean",
    "main_loss",
    "sub_loss",
    "seconds",
)


def method_result(summary_path: Path, evals: Mapping[int, Path], seconds: float, seed: int = 0) -> dict[str, Any]:
    """One run of a method: {"seed", "rewards": per-step rows, "evals": [{step, <metric>: {mean, std, min, max}}],
    "final_questions": {question id: accuracy in the last evaluation}, "seconds"}."""
    summary = json.loads(summary_path.read_text())
    rewards = [{key: row.get(key) for key in REWARD_KEYS} for row in summary["steps"]]
    points, last = [], {}
    for step, path in sorted(evals.items()):
        report = json.loads(path.read_text())
        points.append(
            {
                "step": step,
                **report["aggregate"],
                "questions": report["setup"]["questions"],
                "runs": report["setup"]["runs"],
            }
        )
        last = report
    return {
        "seed": seed,
        "rewards": rewards,
        "evals": points,
        "final_questions": question_accuracy(last),
        "seconds": seconds,
    }


def method_summary(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A method over its seeds: {"runs": [...], "seeds", "final_accuracy": {values, mean, ci_low, ci_high}}."""
    if not runs:
        raise ValueError("a method needs at least one run")
    final = over_seeds([run["evals"][-1]["accuracy"]["mean"] for run in runs])
    return {"seeds": [run["seed"] for run in runs], "final_accuracy": asdict(final), "runs": list(runs)}


def _pooled(result: Mapping[str, Any]) -> dict[str, float]:
    """Question id -> its final accuracy averaged over the method's seeds (questions every seed evaluated)."""
    runs = result["runs"]
    shared = [q for q in runs[0]["final_questions"] if all(q in run["final_questions"] for run in runs)]
    return {q: sum(run["final_questions"][q] for run in runs) / len(runs) for q in shared}


def paired_against(results: Mapping[str, Mapping[str, Any]], reference: str = REFERENCE) -> dict[str, dict[str, Any]]:
    """{other method: the paired difference reference - other (asdict of PairedDifference)}; empty without the
    reference method or another to pair it with."""
    if reference not in results:
        return {}
    ours = _pooled(results[reference])
    paired = {}
    for method, result in results.items():
        theirs = _pooled(result)
        if method == reference or sum(q in theirs for q in ours) < 2:
            continue
        paired[method] = asdict(paired_by_id(ours, theirs)[0])
    return paired


def _mean(values: list[Any]) -> str:
    present = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return f"{sum(present) / len(present):.3f}" if present else "–"


def _interval(final: Mapping[str, Any]) -> str:
    if final["ci_low"] is None:
        return f"{final['mean']:.3f} (one seed)"
    return f"{final['mean']:.3f} [{final['ci_low']:.3f}, {final['ci_high']:.3f}]"


def markdown_table(
    results: Mapping[str, Mapping[str, Any]], paired: Mapping[str, Mapping[str, Any]] | None = None, last_steps: int = 2
) -> str:
    """One row per method: validation accuracy at the start and at the end (mean over the seeds with its 95 %
    t-interval, and each seed's), format-valid rate and sub calls at the end, training rewards over the last
    `last_steps` steps (means over the seeds) and minutes of training; then M-GRPO paired against each other."""
    lines = [
        "| method | seeds | val. accuracy, start | val. accuracy, end: mean [95 % interval] | per seed "
        f"| format valid, end | sub calls/question, end | R_M, last {last_steps} steps | R_S, last {last_steps} steps "
        "| minutes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, result in results.items():
        runs = result["runs"]
        lasts = [run["evals"][-1] for run in runs]
        tails = [row for run in runs for row in run["rewards"][-last_steps:]]
        lines.append(
            f"| {method} | {len(runs)} | {runs[0]['evals'][0]['accuracy']['mean']:.3f} "
            f"| {_interval(result['final_accuracy'])} (step {lasts[0]['step']}) "
            f"| {', '.join(f'{v:.3f}' for v in result['final_accuracy']['values'])} "
            f"| {_mean([p['format_valid']['mean'] for p in lasts])} "
            f"| {sum(p['sub_calls']['mean'] for p in lasts) / len(lasts):.2f} "
            f"| {_mean([r['main_reward_mean'] for r in tails])} | {_mean([r['sub_reward_mean'] for r in tails])} "
            f"| {sum(run['seconds'] for run in runs) / 60:.1f} |"
        )
    if paired:
        lines += [
            "",
            f"| {REFERENCE} − method | questions | difference | 95 % interval | p (sign flip) "
            f"| {REFERENCE} better / method better / tie |",
            "|---|---|---|---|---|---|",
        ]
        for method, p in paired.items():
            test = "" if p["exact"] else ", sampled"
            lines.append(
                f"| {REFERENCE} − {method} | {p['questions']} | {p['difference']:+.3f} "
                f"| [{p['ci_low']:+.3f}, {p['ci_high']:+.3f}] | {p['p_value']:.4f}{test} "
                f"| {p['a_better']} / {p['b_better']} / {p['ties']} |"
            )
    return "\n".join(lines) + "\n"


def time_spent(
    done: Mapping[str, float], warmups_built: Mapping[str, float], wall_seconds: float, parallel: int
) -> dict[str, Any]:
    """What the comparison took: its wall-clock seconds (across the invocations that resumed it), the steps that
    ran at once, the seconds of its steps as they ran (`done`: progress.json's; their sum is up to `parallel`
    times the wall time), by kind of step, and the seconds each warm-up took to build (its warmup.json's; a
    warm-up reused from the model cache ran in seconds here, but was built once in these)."""
    by_kind: dict[str, float] = {}
    for name, seconds in done.items():
        by_kind[step_kind(name)] = by_kind.get(step_kind(name), 0.0) + seconds
    return {
        "wall_seconds": wall_seconds,
        "parallel": parallel,
        "steps_seconds": sum(done.values()),
        "by_kind_seconds": by_kind,
        "warmups_built_seconds": dict(warmups_built),
    }


def time_line(spent: Mapping[str, Any]) -> str:
    """One line of `time_spent`, e.g. "1 h 10 min wall, up to 2 steps at once; the steps' own time 2 h 05 min
    (run 58 min, eval 47 min, warmup 20 min); warm-ups built in 1 h 52 min (multi 1 h 12 min, single 40 min)"."""
    kinds = ", ".join(
        f"{kind} {duration(s)}" for kind, s in sorted(spent["by_kind_seconds"].items(), key=lambda item: -item[1])
    )
    at_once = spent["parallel"]
    line = (
        f"{duration(spent['wall_seconds'])} wall, {'up to ' if at_once > 1 else ''}{at_once} "
        f"step{'s' if at_once > 1 else ''} at once; the steps' own time {duration(spent['steps_seconds'])} ({kinds})"
    )
    built = spent["warmups_built_seconds"]
    if built:
        parts = ", ".join(f"{layout} {duration(s)}" for layout, s in built.items())
        line += f"; warm-ups built in {duration(sum(built.values()))} ({parts})"
    return line
