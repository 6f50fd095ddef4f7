"""`mgrpo bench crossing`: bytes per step that crossed between the main and the sub side, beside the
bytes that stayed on each side (docs/architecture.md §Sides and what crosses them).

It runs a real pipeline job (`mgrpo-node --role all` as a subprocess on a nats-server of its own, with
every node's delivery audit on) and then counts, per step:
- crossed: every SubtaskRequest the sub-agents received, every SubtaskResult the main agents received,
  and every RewardStats the sub aligner received (subtask text and scalars: all that may cross);
- main side: M's trajectories the main aligner received plus the main batches stored for the learner;
- sub side: S's trajectories the sub aligner received plus the sub batches stored for the learner.
Default: SmolLM2 as M and S, 1 step of B = 2 queries × K = 2 rollouts (a few minutes on 2 cores);
`--quick`: the tiny models (which rarely delegate, so little crosses but the stats).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mgrpo_actors.runtime import Bus, EmbeddedNats

__all__ = ["CROSSING_TYPES", "count_bytes", "run"]

CROSSING_TYPES = ("SubtaskRequest", "SubtaskResult", "RewardStats")
RUN_ID = "bench-crossing"


def count_bytes(audit: list[dict[str, Any]]) -> Counter:
    """Bytes by where they belong: "crossed", "main" or "sub" (received messages of an audit log)."""
    totals: Counter = Counter()
    for record in audit:
        if record["type"] in CROSSING_TYPES:
            totals["crossed"] += record["bytes"]
        elif record["type"] == "Trajectory" and record["side"] in ("main", "sub"):
            totals[record["side"]] += record["bytes"]
    return totals


def _job(url: str, audit_dir: Path, quick: bool, steps: int) -> list[str]:
    node = Path(sys.executable).parent / "mgrpo-node"
    models = (
        [
            "--set",
            "agents.main.model=tiny:main",
            "--set",
            "agents.sub.model=tiny:sub",
            "--set",
            "tools.web_entities=150",
        ]
        if quick
        else []
    )
    return [
        str(node),
        "--role",
        "all",
        "--nats",
        url,
        "--run-id",
        RUN_ID,
        "--name",
        "bench",
        "--set",
        f"log.deliveries_dir={audit_dir}",
        "--set",
        "log.level=warning",
        "--set",
        f"pipeline.steps={steps}",
        "--set",
        f"run.dir={audit_dir / 'runs'}",
        *models,
    ]


def run(quick: bool = False, steps: int = 1) -> dict[str, Any]:
    """Run the job, count and print; returns bytes per step by place."""
    with tempfile.TemporaryDirectory(prefix="mgrpo-crossing-") as tmp, EmbeddedNats() as server:
        started = time.perf_counter()
        done = subprocess.run(_job(server.url, Path(tmp), quick, steps), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the pipeline job failed (exit {done.returncode}): {done.stderr[-2000:]}")
        seconds = time.perf_counter() - started
        audit = [json.loads(line) for line in (Path(tmp) / "bench.jsonl").read_text().splitlines()]
        with Bus(server.url, run_id=RUN_ID, node="bench-crossing") as bus:
            stored = {
                side: bus.stream_info(bus.subjects.stream(f"batch-{side}")).state.bytes for side in ("main", "sub")
            }
    totals = count_bytes(audit)
    per_step = {
        "crossed": totals["crossed"] / steps,
        "main": (totals["main"] + stored["main"]) / steps,
        "sub": (totals["sub"] + stored["sub"]) / steps,
    }
    messages = Counter(r["type"] for r in audit if r["type"] in CROSSING_TYPES)
    results = {
        "steps": steps,
        "quick": quick,
        "seconds": seconds,
        "bytes_per_step": per_step,
        "crossing_messages": dict(messages),
    }
    _print(results)
    return results


def _print(results: dict[str, Any]) -> None:
    per_step = results["bytes_per_step"]
    stayed = per_step["main"] + per_step["sub"]
    table = Table(
        title=f"bytes per step ({results['steps']} step(s), {'tiny models' if results['quick'] else 'SmolLM2'}, "
        f"{results['seconds']:.0f} s)"
    )
    for column in ("where", "bytes per step", "share"):
        table.add_column(column, justify="right" if column != "where" else "left")
    total = stayed + per_step["crossed"]
    for where, label in (
        ("crossed", "crossed sides (subtasks, results, scalar stats)"),
        ("main", "stayed on the main side"),
        ("sub", "stayed on the sub side"),
    ):
        table.add_row(label, f"{per_step[where]:,.0f}", f"{per_step[where] / total:.1%}" if total else "")
    Console().print(table)
    Console().print(
        f"crossing messages: {results['crossing_messages']}; crossed / stayed = {per_step['crossed'] / stayed:.4f}"
        if stayed
        else ""
    )
