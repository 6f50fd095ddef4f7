"""`mgrpo compare`'s results: each method's per-step rewards (its run's summary.json) and its validation
figures at every evaluated step (`mgrpo eval` reports), as one JSON document and a markdown table."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["REWARD_KEYS", "markdown_table", "method_result"]

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


def method_result(summary_path: Path, evals: Mapping[int, Path], seconds: float) -> dict[str, Any]:
    """{"rewards": per-step rows, "evals": [{step, <metric>: {mean, std, min, max}}], "seconds"} of one method."""
    summary = json.loads(summary_path.read_text())
    rewards = [{key: row.get(key) for key in REWARD_KEYS} for row in summary["steps"]]
    points = []
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
    return {"rewards": rewards, "evals": points, "seconds": seconds}


def _spread(point: Mapping[str, Any], name: str) -> str:
    s = point[name]
    return f"{s['mean']:.3f} ± {s['std']:.3f}"


def _mean(values: list[Any]) -> str:
    present = [float(v) for v in values if v is not None]
    return f"{sum(present) / len(present):.3f}" if present else "–"


def markdown_table(results: Mapping[str, Mapping[str, Any]], last_steps: int = 2) -> str:
    """One row per method: validation accuracy at the start and at the end (mean ± std over the eval
    runs), format-valid rate and sub calls at the end, training rewards over the last `last_steps` steps."""
    lines = [
        "| method | val. accuracy, start | val. accuracy, end | format valid, end | sub calls/question, end "
        f"| R_M, last {last_steps} steps | R_S, last {last_steps} steps | minutes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, result in results.items():
        first, last = result["evals"][0], result["evals"][-1]
        tail = result["rewards"][-last_steps:]
        lines.append(
            f"| {method} | {_spread(first, 'accuracy')} | {_spread(last, 'accuracy')} (step {last['step']}) "
            f"| {_spread(last, 'format_valid')} | {last['sub_calls']['mean']:.2f} "
            f"| {_mean([r['main_reward_mean'] for r in tail])} | {_mean([r['sub_reward_mean'] for r in tail])} "
            f"| {result['seconds'] / 60:.1f} |"
        )
    return "\n".join(lines) + "\n"
