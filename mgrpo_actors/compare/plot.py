"""`mgrpo compare`'s figure, like the paper's: per method, the training reward curves of both agents and
the validation accuracy at every evaluated step (mean over the eval runs, bars from their min to max).
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


def write_compare_png(results: Mapping[str, Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Three panels: R_M per training step, R_S per training step, validation accuracy per evaluated step."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(14, 4.2), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 3)
    for index, (method, result) in enumerate(results.items()):
        # one colour per method in every panel (a panel may lack a method: single-agent has no R_S)
        colour = f"C{index}"
        # step n is rolled out by the policy after n updates (sync mode)
        steps = [row["step"] for row in result["rewards"]]
        for ax, (key, _) in zip(axes[:2], _PANELS, strict=True):
            values = [_value(row, key) for row in result["rewards"]]
            if not all(math.isnan(v) for v in values):
                ax.plot(steps, values, marker="o", label=method, color=colour)
        points = result["evals"]
        means = [p["accuracy"]["mean"] for p in points]
        low = [p["accuracy"]["mean"] - p["accuracy"]["min"] for p in points]
        high = [p["accuracy"]["max"] - p["accuracy"]["mean"] for p in points]
        axes[2].errorbar(
            [p["step"] for p in points], means, yerr=[low, high], marker="o", capsize=3, label=method, color=colour
        )
    for ax, (_, label) in zip(axes[:2], _PANELS, strict=True):
        ax.set_title(label)
        ax.set_xlabel("steps trained (before the step's rollouts)")
    axes[2].set_title("validation accuracy (min-max over eval runs)")
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
