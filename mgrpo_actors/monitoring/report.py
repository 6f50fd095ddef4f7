"""The files a run leaves in its directory (`<run.dir>/<run.id>/`) at its end: `summary.json` (one row
per step, steps.py's StepRecord.row, and `learning`: M's correct rollouts in the first steps against the
last ones on the same questions, learning.py; null where there is nothing like for like) and
`rewards.png` (per-step R_M and R_S means and M's correct rate; with sub-agent types other than the one default,
"sub", one R_S line per type, from the rows' `subs`). matplotlib is imported only here, when
the PNG is written, and draws without a display (Agg)."""

from __future__ import annotations

import io
import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mgrpo_actors.monitoring.learning import learning_check
from mgrpo_actors.runtime.disk import atomic_write_bytes, atomic_write_text
from protocols import DEFAULT_SUB_TYPE

__all__ = ["SUMMARY_FILE", "REWARDS_FILE", "reward_curves", "write_report", "write_rewards_png", "write_summary_json"]

SUMMARY_FILE = "summary.json"
REWARDS_FILE = "rewards.png"

# (row key, label, colour, line style) of the lines in rewards.png (M correct dashed: it often equals R_M).
_MAIN_REWARD = ("main_reward_mean", "R_M mean (main agent)", "tab:blue", "-")
_SUB_REWARD = ("sub_reward_mean", "R_S mean (sub-agent)", "tab:orange", "-")
_MAIN_CORRECT = ("main_correct", "M correct (r_correct mean)", "tab:green", "--")
# The R_S lines of several sub-agent types, in config order (none of them blue or green, M's colours).
_SUB_TYPE_COLOURS = ("tab:orange", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: null instead (also inside a row's `subs`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
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
    """Per-step R_M mean, R_S mean (one line per sub-agent type where the run has types other than the one
    default) and M correct as lines with markers (a step without a figure is a gap)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(figure)  # draws into memory: no display, no pyplot state
    axes = figure.add_subplot()
    steps = [row["step"] for row in rows]
    for label, values, colour, style in reward_curves(rows):
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


def reward_curves(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[float], str, str]]:
    """(label, per-step values, NaN for a gap, colour, line style) of each line of rewards.png: a run of the one
    default type (or none) has today's R_S line, from the flat row; any other, one per type, from the rows' `subs`."""

    def curve(key: str, label: str, colour: str, style: str) -> tuple[str, list[float], str, str]:
        return label, [_value(row.get(key)) for row in rows], colour, style

    sub_types = list(rows[0].get("subs") or {}) if rows else []
    if sub_types in ([], [DEFAULT_SUB_TYPE]):
        return [curve(*_MAIN_REWARD), curve(*_SUB_REWARD), curve(*_MAIN_CORRECT)]
    per_type = [
        (f"R_S {sub_type}", [_value(row["subs"][sub_type]["reward_mean"]) for row in rows], colour, "-")
        for sub_type, colour in zip(sub_types, itertools.cycle(_SUB_TYPE_COLOURS))
    ]
    return [curve(*_MAIN_REWARD), *per_type, curve(*_MAIN_CORRECT)]


def _value(figure: Any) -> float:
    return math.nan if figure is None else float(figure)


def write_report(
    rows: Sequence[dict[str, Any]], run_dir: Path, run_id: str, seconds: float | None = None
) -> list[Path]:
    """summary.json and rewards.png in `run_dir`; returns their paths."""
    return [
        write_summary_json(rows, run_dir / SUMMARY_FILE, run_id, seconds),
        write_rewards_png(rows, run_dir / REWARDS_FILE, f"run {run_id}: rewards per step"),
    ]
