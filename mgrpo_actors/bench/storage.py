"""`mgrpo bench storage`: a long tiny run's JetStream storage and memory, at its start, middle and end (issue 23).

One `mgrpo run` of the tiny models (`make run-tiny`'s job: every role in one process on its embedded
nats-server) for STEPS steps (QUICK_STEPS with `--quick`), in a temporary run directory. After the steps in
MARKS' places it reads, while the run goes on: every stream's bytes and messages (connected as the run's own
user), the RSS of the run's process and of its nats-server. Consumed work leaves the streams (runtime/retention.py,
nats.keep_consumed_steps), the aligners keep their records under one key (alignment/records.py); what is left is
bounded by the stream caps (nats.stream_max_msgs), which the bench sets low enough to be reached within the run
(METRICS_CAP, STEPS_CAP; the defaults, 1,000,000 and 100,000 messages, are reached only after ~14,000 and
~20,000 steps): storage must then be at a plateau, growing less than TARGET_GROWTH from the middle to the end,
and each process's RSS less than TARGET_GROWTH from the start to the end.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mgrpo_actors.runtime.run_credentials import run_credentials

__all__ = ["METRICS_CAP", "QUICK_STEPS", "STEPS", "STEPS_CAP", "TARGET_GROWTH", "run"]

STEPS = 1000
QUICK_STEPS = 6
METRICS_CAP = 20_000  # messages: ~70 a tiny step, reached by step ~300
STEPS_CAP = 1_000  # messages: ~5 a step, reached by step ~200
TARGET_GROWTH = 0.10
RUN_ID = "bench-storage"
FINISHED = re.compile(r"step (\d+) finished in")


def _marks(steps: int) -> dict[str, int]:
    """The steps after which to measure: start (once the kept steps of consumed work have filled), middle, end."""
    if steps < 4:
        raise ValueError(f"the storage bench needs at least 4 steps (start, middle and end apart), got {steps}")
    if steps < 40:  # --quick: a smoke test of the bench, too short for a plateau
        return {"start": 1, "middle": steps // 2, "end": steps - 1}
    return {"start": max(12, steps // 10), "middle": steps // 2, "end": steps - 1}


def _command(run_dir: Path, steps: int, quick: bool) -> list[str]:
    mgrpo = Path(sys.executable).parent / "mgrpo"  # this venv's
    caps = f"{{metrics: {METRICS_CAP}, dlq: 100000, steps: {STEPS_CAP}}}"
    sets = [
        "agents.main.model=tiny:main",
        "agents.sub.model=tiny:sub",
        "tools.web_entities=150",
        f"pipeline.steps={steps}",
        f"run.dir={run_dir}",
        f"run.id={RUN_ID}",
        f"nats.stream_max_msgs={caps}",
        "warmup.steps=0",
        *(("nats.keep_consumed_steps=1",) if quick else ()),
    ]
    executable = str(mgrpo) if mgrpo.is_file() else "mgrpo"
    return [executable, "run", *(arg for item in sets for arg in ("--set", item))]


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _nats_server_pid(parent: int) -> int | None:
    """The run's nats-server: the child of `parent` named so."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            name, ppid = fields[0].split("(", 1)[1], int(fields[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and name == "nats-server":
            return int(stat.parent.name)
    return None


async def _streams(run_dir: Path) -> dict[str, tuple[int, int]]:
    """(messages, bytes) per stream of the run, KV and object-store streams included."""
    import nats

    credentials = run_credentials(run_dir)
    nc = await nats.connect(credentials.url, user=credentials.user, password=credentials.password)
    try:
        infos = await nc.jetstream().streams_info()
    finally:
        await nc.close()
    return {i.config.name: (i.state.messages, i.state.bytes) for i in infos if RUN_ID in i.config.name}


def _measure(run_dir: Path, pid: int, step: int) -> dict[str, Any]:
    streams = asyncio.run(_streams(run_dir))
    nats_pid = _nats_server_pid(pid)
    return {
        "step": step,
        "bytes": sum(b for _, b in streams.values()),
        "streams": {name: {"messages": m, "bytes": b} for name, (m, b) in sorted(streams.items())},
        "rss_mib": {"run": _rss_mib(pid), "nats-server": _rss_mib(nats_pid) if nats_pid else None},
    }


def _growth(before: float | None, after: float | None) -> float | None:
    return None if not before or after is None else after / before - 1


def run(quick: bool = False, steps: int | None = None) -> dict[str, Any]:
    steps = steps or (QUICK_STEPS if quick else STEPS)
    marks = _marks(steps)
    wanted = {step: name for name, step in marks.items()}
    console = Console()
    console.print(f"[bold]bench storage[/bold]: {steps} steps of the tiny job, measured after steps {marks}")
    samples: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mgrpo-bench-storage-") as tmp:
        run_dir = Path(tmp) / RUN_ID
        log = Path(tmp) / "run.log"
        env = {**os.environ, "COLUMNS": "200"}
        with open(log, "w") as out:
            proc = subprocess.Popen(
                _command(Path(tmp), steps, quick), stdout=subprocess.PIPE, stderr=out, text=True, env=env
            )
            assert proc.stdout is not None
            try:
                for line in proc.stdout:
                    out.write(line)
                    found = FINISHED.search(line)
                    if found and int(found.group(1)) in wanted:
                        name = wanted[int(found.group(1))]
                        samples[name] = _measure(run_dir, proc.pid, int(found.group(1)))
                        console.print(f"  after step {found.group(1)}: {samples[name]['bytes'] / 1e6:.2f} MB stored")
                code = proc.wait()
            finally:  # a failed measurement stops the run (and its nats-server) before its directory goes
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        if code != 0 or len(samples) != len(marks):
            raise RuntimeError(f"the bench's run failed (exit {code}): {log.read_text()[-3000:]}")
    results = _results(samples, steps, time.monotonic() - started)
    _print(results, console)
    return results


def _results(samples: dict[str, dict[str, Any]], steps: int, seconds: float) -> dict[str, Any]:
    start, middle, end = samples["start"], samples["middle"], samples["end"]
    storage_growth = _growth(middle["bytes"], end["bytes"])
    rss_growth = {name: _growth(start["rss_mib"][name], end["rss_mib"][name]) for name in start["rss_mib"]}
    return {
        "steps": steps,
        "seconds": seconds,
        "samples": samples,
        "storage_growth": storage_growth,
        "rss_growth": rss_growth,
        "storage_plateau": storage_growth is not None and storage_growth < TARGET_GROWTH,
        "rss_bounded": all(g is not None and g < TARGET_GROWTH for g in rss_growth.values()),
    }


def _category(stream: str) -> str:
    """What a stream of the run holds, for the table."""
    name = stream.replace(f"mgrpo-{RUN_ID}-", "")
    if name.startswith("KV_"):
        return "KV"
    if name.startswith("OBJ_"):
        return "weights"
    return name if name in ("steps", "metrics") else "work"  # rollouts, trajectories, stats, batches, dlq


def _print(results: dict[str, Any], console: Console) -> None:
    samples = results["samples"]
    table = Table(title=f"storage (MB) and memory over {results['steps']} steps ({results['seconds'] / 60:.1f} min)")
    categories = ("work", "steps", "metrics", "KV", "weights")
    for column in ("", "step", "stored", *categories, "RSS run MiB", "RSS nats MiB"):
        table.add_column(column, justify="right")
    for name in ("start", "middle", "end"):
        sample = samples[name]
        by = dict.fromkeys(categories, 0)
        for stream, figures in sample["streams"].items():
            by[_category(stream)] += figures["bytes"]
        rss = sample["rss_mib"]
        table.add_row(
            name,
            str(sample["step"]),
            f"{sample['bytes'] / 1e6:.2f}",
            *(f"{by[c] / 1e6:.2f}" for c in categories),
            f"{rss['run']:.0f}" if rss["run"] else "?",
            f"{rss['nats-server']:.0f}" if rss["nats-server"] else "?",
        )
    console.print(table)
    growth = results["storage_growth"]
    console.print(
        f"storage, middle to end: {'?' if growth is None else f'{growth:+.1%}'} (target < {TARGET_GROWTH:.0%}): "
        f"{'met' if results['storage_plateau'] else 'NOT met'}"
    )
    rss = ", ".join(f"{name} {g:+.1%}" if g is not None else f"{name} ?" for name, g in results["rss_growth"].items())
    console.print(
        f"RSS, start to end: {rss} (target < {TARGET_GROWTH:.0%}): {'met' if results['rss_bounded'] else 'NOT met'}"
    )
