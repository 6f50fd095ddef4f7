"""`mgrpo compare`'s figure, like the paper's: per method, the training reward curves of both agents (mean
over the seeds, shaded from the lowest seed's to the highest's) and the validation accuracy at every evaluated
step (mean over the seeds of each evaluation's mean over its runs, bars from the lowest seed's to the highest's).
matplotlib draws without a display (Agg), as monitoring/report.py does."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mgrpo_actors.runtime.disk import atomic_write_bytes

__all__ = ["write_compare_png"]

_PANELS = (("main_reward_mean", "R_M (main agent; the single agent's reward)"), ("sub_reward_mean", "R_S (sub-agent)"))


def _value(row: Mapping[str, Any], key: str) -> float:
    return math.nan if row.get(key) is None else float(row[key])


def _per_step(runs: list[Mapping[str, Any]], key: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """(steps, mean, min, max) of `key` over the runs at each step every run has (NaN where none reports it)."""
    rows = [{row["step"]: row for row in run["rewards"]} for run in runs]
    steps = sorted(set.intersection(*(set(by_step) for by_step in rows)))
    columns = [[_value(by_step[step], key) for by_step in rows] for step in steps]
    present = [[v for v in column if not math.isnan(v)] for column in columns]
    mean = [sum(c) / len(c) if c else math.nan for c in present]
    return steps, mean, [min(c) if c else math.nan for c in present], [max(c) if c else math.nan for c in present]


def write_compare_png(results: Mapping[str, Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Three panels: R_M per training step, R_S per training step, validation accuracy per evaluated step; each
    method's `results[method]["runs"]` are its seeds."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(14, 4.2), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 3)
    for index, (method, result) in enumerate(results.items()):
        # one colour per method in every panel (a panel may lack a method: single-agent has no R_S)
        colour = f"C{index}"
        runs = result["runs"]
        label = f"{method} ({len(runs)} seed{'' if len(runs) == 1 else 's'})"
        # step n is rolled out by the policy after n updates (sync mode)
        for ax, (key, _) in zip(axes[:2], _PANELS, strict=True):
            steps, mean, low, high = _per_step(runs, key)
            if not all(math.isnan(v) for v in mean):
                ax.plot(steps, mean, marker="o", label=label, color=colour)
                if len(runs) > 1:
                    ax.fill_between(steps, low, high, color=colour, alpha=0.2, linewidth=0)
        points = [{p["step"]: p for p in run["evals"]} for run in runs]
        evaluated = sorted(set.intersection(*(set(by_step) for by_step in points)))  # steps every seed evaluated
        by_step = [[run[step]["accuracy"]["mean"] for run in points] for step in evaluated]
        means = [sum(v) / len(v) for v in by_step]
        low = [m - min(v) for m, v in zip(means, by_step, strict=True)]
        high = [max(v) - m for m, v in zip(means, by_step, strict=True)]
        axes[2].errorbar(evaluated, means, yerr=[low, high], marker="o", capsize=3, label=label, color=colour)
    for ax, (_, label) in zip(axes[:2], _PANELS, strict=True):
        ax.set_title(label)
        ax.set_xlabel("steps trained (before the step's rollouts)")
    axes[2].set_title("validation accuracy (mean over seeds, min-max)")
    axes[2].set_xlabel("steps trained")
    for ax in axes:
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a panel may have no curve (R_S of a single-agent-only comparison)
            ax.legend(loc="best", fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return atomic_write_bytes(path, png.getvalue(), "the comparison plot")  # whole or not at all
