"""`mgrpo eval --compare A B`: the paired difference of two `mgrpo eval --out` reports, question by question
(mgrpo_actors/evaluation/paired.py), as a table and, with `--out`, as JSON. Loads no model."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mgrpo_actors.evaluation.paired import BOOTSTRAP_RESAMPLES, PairedDifference, paired_from_reports
from mgrpo_actors.runtime.disk import DiskFullError, atomic_write_text

__all__ = ["run_compare_command"]

# Flags that choose what to evaluate: meaningless beside --compare, which only reads two reports.
_EVAL_ONLY = ("main", "sub", "checkpoints", "file", "split", "limit", "web_seed", "entities")


def _report(path: str) -> dict[str, Any]:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such report") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a JSON report ({exc})") from None
    if not isinstance(report, dict):
        raise ValueError(f"{path}: not an `mgrpo eval` report")
    return report


def _setup_notes(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between the two reports' setups besides the models (the reader should know)."""
    sa, sb = a.get("setup", {}), b.get("setup", {})
    return [
        f"{key} differs: A {sa.get(key)!r}, B {sb.get(key)!r}"
        for key in ("dataset", "correct_judge", "budgets", "seeds", "batch_questions")
        if sa.get(key) != sb.get(key)
    ]


def _table(paired: PairedDifference, names: tuple[str, str]) -> Table:
    table = Table(title=f"A - B, paired over {paired.questions} questions (accuracy = mean correct over runs)")
    for column in ("A", "B", "A - B", "95 % interval", "std error", "p (sign flip)", "A better / B better / tie"):
        table.add_column(column, justify="right")
    exact = "exact" if paired.exact else "sampled"
    table.add_row(
        f"{paired.mean_a:.3f}",
        f"{paired.mean_b:.3f}",
        f"{paired.difference:+.3f}",
        f"[{paired.ci_low:+.3f}, {paired.ci_high:+.3f}]",
        f"{paired.std_error:.3f}",
        f"{paired.p_value:.4f} ({exact})",
        f"{paired.a_better} / {paired.b_better} / {paired.ties}",
    )
    table.caption = f"A: {names[0]} · B: {names[1]} · interval: percentile bootstrap, {BOOTSTRAP_RESAMPLES:,} resamples"
    return table


def _line(p: PairedDifference) -> str:
    """The result in one line (a table folds in a narrow terminal; logs keep lines)."""
    test = "exact" if p.exact else "sampled"
    return (
        f"A - B = {p.difference:+.3f} (A {p.mean_a:.3f}, B {p.mean_b:.3f}), 95 % interval [{p.ci_low:+.3f}, "
        f"{p.ci_high:+.3f}], p = {p.p_value:.4f} ({test} sign flip); A better on {p.a_better}, B on {p.b_better}, "
        f"tied on {p.ties} of {p.questions} questions"
    )


def run_compare_command(args: argparse.Namespace) -> int:
    """2 with a one-line message when a report cannot be read or the two share no question."""
    out, err = Console(highlight=False, soft_wrap=True), Console(stderr=True, highlight=False, soft_wrap=True)
    given = [f"--{name.replace('_', '-')}" for name in _EVAL_ONLY if getattr(args, name, None) is not None]
    if given or args.single_agent:
        err.print(
            f"mgrpo eval: error: --compare reads two reports; {', '.join(given or ['--single-agent'])} "
            "choose what to evaluate",
            markup=False,
        )
        return 2
    path_a, path_b = args.compare
    try:
        a, b = _report(path_a), _report(path_b)
        paired, shared, only_a, only_b = paired_from_reports(a, b)
    except ValueError as exc:
        err.print(f"mgrpo eval: error: {exc}", markup=False)
        return 2
    for note in _setup_notes(a, b):
        out.print(f"note: {note}", markup=False)
    if only_a or only_b:
        out.print(f"note: paired over the {len(shared)} shared questions ({only_a} only in A, {only_b} only in B)")
    out.print(_table(paired, (path_a, path_b)))
    out.print(_line(paired), markup=False)
    if args.out is not None:
        document = {"a": path_a, "b": path_b, "only_in_a": only_a, "only_in_b": only_b, **asdict(paired)}
        try:
            atomic_write_text(args.out, json.dumps(document, indent=2) + "\n", "the paired comparison")
        except DiskFullError as exc:
            err.print(f"mgrpo eval: {exc.strerror}", markup=False)
            return 1
        out.print(f"paired comparison written to {args.out}", markup=False)
    return 0
