"""`mgrpo warmup`: the optional supervised format warm-up for small models (stage 0, before RL).

Fine-tunes each agent for a few dozen steps on worked episodes of train questions of the built-in
web, written by an oracle that knows the evidence and run through the real agent loop and tools
(mgrpo_actors/warmup/oracle.py, web.py), and saves each as a local HF directory. Untrained
SmolLM2-135M rarely writes a valid episode, so RL has little signal; after this it has the format
and the tool protocol, and M-GRPO has to learn the rest. It is optional and documented as such: it
shows the model gold answers of train-split questions (never validation or test).

    mgrpo warmup                                   # SmolLM2 as M and as S -> runs/warmup/main, runs/warmup/sub
    mgrpo warmup --main tiny:main --sub tiny:sub --steps 5 --out /tmp/w
    mgrpo warmup --set run.method=single-agent     # the single agent only
    mgrpo warmup --kinds lookup,compare --set agents.main.max_turns=5   # also one subtask per named entity
    mgrpo run --set agents.main.model=runs/warmup/main --set agents.sub.model=runs/warmup/sub
    mgrpo warmup --reuse --out /tmp/w              # built once per machine (the model cache), linked into --out

Its settings default to the config's `warmup` section (the flags win). `mgrpo run` with `warmup.steps` > 0 does
the same warm-up itself, once, into the model cache, and starts RL from it (mgrpo_actors/warmup/cached.py).
`--reuse` builds into that cache too (or reuses what is there: the same models, tools, agents and warm-up
settings) and makes <out>/<side> links to it, with a copy of its warmup.json; `mgrpo compare --warmup` uses it,
so a comparison whose warm-up settings did not change never warms up again on the same machine. A --reuse build
that is interrupted (Ctrl-C or SIGTERM: after the step it is in; a killed process or a restarted machine: from its
last checkpoint, `warmup.checkpoint_seconds`) goes on where it was when the same command runs again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mgrpo_actors.cli.arguments import add_config_arguments, model_overrides

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> int:
    # Imported on use: torch and transformers take seconds to import.
    from mgrpo_actors.config import ConfigError, load_node_config
    from mgrpo_actors.warmup.web import warm_up_agents

    overrides = [*args.overrides, *model_overrides(args)]
    try:
        config = load_node_config(args.config, overrides, "mgrpo warmup")
        # the flags win over the config's warmup section; its steps 0 (no warm-up in `mgrpo run`) means 8 here
        given = {
            name: value
            for name, value in (
                ("questions", args.questions),
                ("steps", args.steps),
                ("sub_steps", args.sub_steps),
                ("batch_size", args.batch_size),
                ("lr", args.lr),
                ("seed", args.seed),
                ("kinds", None if args.kinds is None else [k.strip() for k in args.kinds.split(",") if k.strip()]),
            )
            if value is not None
        }
        cfg = dataclasses.replace(config.warmup, **given)
        if cfg.steps == 0:
            cfg = dataclasses.replace(cfg, steps=8)
    except (ConfigError, ValueError) as exc:
        print(f"mgrpo warmup: error: {exc}", file=sys.stderr)
        return 2

    started: dict[str, tuple[float, int]] = {}  # side -> (when, step): its first step this process took
    stop = _StopBetweenSteps()

    def progress(side: str, step: int, loss: float) -> None:
        now, steps = time.perf_counter(), cfg.steps_of(side)
        every = max(5, steps // 50)  # at most about 50 lines per agent
        if side not in started and step:
            print(f"  {side}: resumed after step {step} of {steps} (an earlier attempt's checkpoint)", flush=True)
        if step == cfg.copy_steps and step:  # the episodes begin: time them alone (a practice step is far cheaper)
            started[side] = (now, step)
        began, first = started.setdefault(side, (now, step))
        if step % every == 0 or step == steps - 1:
            timing = ""
            if step > first:  # timed from the end of its first step: the estimate follows the steps after it
                left = (now - began) / (step - first) * (steps - 1 - step)
                timing = f", {now - began:.0f} s since step {first + 1}, ~{left:.0f} s left"
            print(f"  {side}: step {step + 1}/{steps}, loss {loss:.4f}{timing}", flush=True)
        stop.check(side, step, bool(args.reuse))

    counts = cfg.steps_said(with_sub=config.warmup_trains_sub)
    print(
        f"warm-up of {config.run.method} agents on {cfg.learns_from()}, {counts} × {cfg.batch_size} samples, "
        f"lr {cfg.lr:g}, {cfg.dtype}",
        flush=True,
    )
    try:
        with stop.on_signals():
            if args.reuse:
                dirs = _reused(dataclasses.replace(config, warmup=cfg), Path(args.out), progress)
            else:
                dirs = warm_up_agents(config, cfg, Path(args.out), progress)
    except (ValueError, OSError) as exc:
        print(f"mgrpo warmup: error: {exc}", file=sys.stderr)
        return 2
    sets = " ".join(f"--set agents.{side}.model={path}" for side, path in dirs.items())
    print(
        f"warmed-up models: {', '.join(f'{side} {path}' for side, path in dirs.items())} "
        f"(settings and losses in {Path(args.out) / 'warmup.json'})"
    )
    copied = _copied_shares(Path(args.out) / "warmup.json")
    if copied:
        print(f"copying (held-out runs of ids written four times, the repeats' ids predicted): {copied}")
    print(f"use them: mgrpo run {sets}")
    return 0


class _StopBetweenSteps:
    """Ctrl-C or SIGTERM (`mgrpo compare` stopping its steps) ends the warm-up after the step it is in, whose state a
    --reuse build then saves (warmup/checkpoint.py) for the same command to go on from; a second one stops at once."""

    def __init__(self) -> None:
        self.asked = False

    @contextmanager
    def on_signals(self) -> Iterator[None]:
        def ask(signum: int, frame: Any) -> None:
            if self.asked:
                raise KeyboardInterrupt
            self.asked = True
            print("mgrpo warmup: stopping after this step (again: at once)", file=sys.stderr, flush=True)

        before = {sig: signal.signal(sig, ask) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)

    def check(self, side: str, step: int, saved: bool) -> None:
        if self.asked:
            where = "saved: the same command goes on from there" if saved else "not saved (only --reuse builds are)"
            print(f"mgrpo warmup: stopped after {side}'s step {step + 1}, {where}", file=sys.stderr, flush=True)
            raise KeyboardInterrupt


def _copied_shares(record: Path) -> str:
    """Each agent's `copied_share` from a warmup.json (warmup/copying.py), in words; "" where none is recorded (a
    warm start built before it was measured)."""
    try:
        agents = json.loads(record.read_text())["agents"]
    except (OSError, ValueError, KeyError):
        return ""
    shares = {side: agent["copied_share"] for side, agent in agents.items() if "copied_share" in agent}
    return ", ".join(f"{side} {share:.0%}" for side, share in shares.items())


def _reused(config: Any, out: Path, progress: Any) -> dict[str, Path]:
    """`config`'s warm start from the model cache (built there first if it is not yet), linked as out/<side>,
    its warmup.json written to out/ naming those links; {side: out/<side>}."""
    from mgrpo_actors.models.cache import left_by_interrupted_build
    from mgrpo_actors.warmup.cached import warm_start, warm_start_dir
    from mgrpo_actors.warmup.linked import link_warm_start

    target = warm_start_dir(config)
    root = target.parent.parent.absolute()  # the model cache (models/cache.py cache_root)
    if out.absolute() == root or root in out.absolute().parents:
        raise ValueError(f"--out {out} is inside the model cache ({root}): name a directory outside it")
    resumed = " (an interrupted build of it goes on where it was)" if left_by_interrupted_build(target) else ""
    print(f"warm start in the model cache: {target}{resumed}", flush=True)
    start = warm_start(config, progress)
    if not start.built:
        print(f"reused: built there before in {start.seconds:.0f} s", flush=True)
    return link_warm_start(start, out)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "warmup",
        help="optional supervised format warm-up of small models before RL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(
        p,
        "node config YAML (agents, tools and run.method are read from it)",
        "main agent's model (agents.main.model; the single agent's under single-agent)",
        "sub-agent's model (agents.sub.model)",
    )
    p.add_argument(
        "--out",
        default="runs/warmup",
        metavar="DIR",
        help="where <side>/ model directories and warmup.json go (default runs/warmup)",
    )
    p.add_argument(
        "--questions",
        type=int,
        metavar="N",
        help="train questions worked by the oracle (default: warmup.questions, 48)",
    )
    p.add_argument(
        "--kinds",
        metavar="K,K",
        help="their kinds, taken in turn: lookup, compare, aggregate, difference (default: warmup.kinds, lookup)",
    )
    p.add_argument(
        "--steps",
        type=int,
        metavar="N",
        help="optimizer steps of M or the single agent, and of S unless it has its own (default: warmup.steps, or 8 "
        "where it is 0), each agent's after its warmup.copy_steps of copying practice",
    )
    p.add_argument(
        "--sub-steps",
        type=int,
        metavar="N",
        help="S's optimizer steps where they differ from --steps (default: warmup.sub_steps; 0 = --steps)",
    )
    p.add_argument("--batch-size", type=int, metavar="N", help="episodes per step (default: warmup.batch_size, 4)")
    p.add_argument("--lr", type=float, help="AdamW learning rate (default: warmup.lr, 2e-5)")
    p.add_argument("--seed", type=int, help="seed of the episode draws (default: warmup.seed, 0)")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="build in the machine's model cache (or reuse the same warm-up built there before) and link <out>/<side> "
        "to it; an interrupted build goes on where it was when run again",
    )
    p.set_defaults(func=_run)
