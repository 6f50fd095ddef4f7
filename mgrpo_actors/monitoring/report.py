"""The files a run leaves in its directory (`<run.dir>/<run.id>/`) at its end: `summary.json` (one row
per step, steps.py's StepRecord.row, and `learning`: M's correct rollouts in the first steps against the
last ones on the same questions, learning.py; null where there is nothing like for like) and
`rewards.png` (per-step R_M and R_S means and M's correct rate). matplotlib is imported only here, when
the PNG is written, and draws without a display (Agg)."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mgrpo_actors.monitoring.learning import learning_check
from mgrpo_actors.runtime.disk import atomic_write_bytes, atomic_write_text

__all__ = ["SUMMARY_FILE", "REWARDS_FILE", "write_report", "write_rewards_png", "write_summary_json"]

SUMMARY_FILE = "summary.json"
REWARDS_FILE = "rewards.png"

# (row key, label, colour, line style) of the lines in rewards.png (M correct dashed: it often equals R_M).
_CURVES = (
    ("main_reward_mean", "R_M mean (main agent)", "tab:blue", "-"),
    ("sub_reward_mean", "R_S mean (sub-agent)", "tab:orange", "-"),
    ("main_correct", "M correct (r_correct mean)", "tab:green", "--"),
)


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_summary_json(rows: Sequence[dict[str, Any]], path: Path, run_id: str, seconds: float | None = None) -> Path:
    """{"run_id", "seconds", "steps": rows, "learning"} as JSON (missing figures are null)."""
    check = learning_check(rows)
    document = {
        "run_id": run_id,
        "seconds": _clean(seconds),
        "steps": [{k: _clean(v) for k, v in row.items()} for row in rows],
        "learning": None if check is None else check.as_dict(),
    }
    return atomic_write_text(path, json.dumps(document, indent=2, allow_nan=False) + "\n", "the run summary")


def write_rewards_png(rows: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Per-step R_M mean, R_S mean and M correct as lines with markers (a step without a figure is a gap)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(figure)  # draws into memory: no display, no pyplot state
    axes = figure.add_subplot()
    steps = [row["step"] for row in rows]
    for key, label, colour, style in _CURVES:
        values = [math.nan if row.get(key) is None else float(row[key]) for row in rows]
        axes.plot(steps, values, marker="o", linestyle=style, label=label, color=colour)
    axes.set_xlabel("step")
    axes.set_ylabel("reward")
    axes.set_title(title or "rewards per step")
    if steps:
        axes.set_xticks(steps if len(steps) <= 20 else steps[:: max(1, len(steps) // 20)])
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return atomic_write_bytes(path, png.getvalue(), "the rewards plot")


def write_report(
    rows: Sequence[dict[str, Any]], run_dir: Path, run_id: str, seconds: float | None = None
) -> list[Path]:
    """summary.json and rewards.png in `run_dir`; returns their paths."""
    return [
        write_summary_json(rows, run_dir / SUMMARY_FILE, run_id, seconds),
        write_rewards_png(rows, run_dir / REWARDS_FILE, f"run {run_id}: rewards per step"),
    ]
