"""`mgrpo rollout`: one question through the main agent and its sub-agents (or the single agent), on CPU,
with the transcript of every agent (tool calls, tool results, answers) and the reward parts.

    mgrpo rollout                                   # SmolLM2 as M and as S, train question 0
    mgrpo rollout --question-index 7 --k 2 --seed 3
    mgrpo rollout --main tiny:main --sub tiny:sub   # tiny random models: seconds, mostly malformed turns
    mgrpo rollout --single-agent                    # the baseline: one agent with every tool
    mgrpo rollout --config run.yaml --set agents.sub.temperature=1.0

It reads the node config (`--config`, `--set`; see deploy/configs/default.yaml): agents.main/agents.sub
(models, budgets, sampling), the judges, algo.rewards and the synthetic web of `tools`. The flags below
are shortcuts for the most used keys and win over the config. M and S are separate model instances
even when they are the same model (in real use they are different LLMs). Each trajectory is built
token-in/token-out exactly as for training; this command only prints it.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from mgrpo_actors.cli.arguments import add_config_arguments
from mgrpo_actors.envs.dataset import SPLITS

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> int:
    # Imported on use: torch and transformers take seconds to import, and `mgrpo tap` should not wait.
    return importlib.import_module("mgrpo_actors.cli.rollout_view").run_rollout_command(args)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "rollout",
        help="run one question through the main agent and sub-agents, print both transcripts and the rewards",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(
        p,
        "node config YAML (the same file mgrpo-node reads)",
        "main agent's model (agents.main.model): smollm2, tiny:main, or a local HF dir",
        "sub-agent's model (agents.sub.model), a separate instance",
        "override a config key, e.g. agents.main.top_p=0.9",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--question-index", type=int, default=0, metavar="N", help="question N of the split (default 0)")
    which.add_argument("--question-id", metavar="ID", help="the question with this id")
    p.add_argument("--split", default="train", choices=SPLITS, help="split to pick the question from")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--web-seed", type=int, metavar="N", help="seed of the synthetic web (tools.web_seed)")
    p.add_argument("--entities", type=int, metavar="N", help="entities of the synthetic web (tools.web_entities)")
    p.add_argument("--k", type=int, default=1, help="rollouts of the question (default 1)")
    p.add_argument(
        "--max-turns", type=int, metavar="N", help="turns per agent (both agents' max_turns; config default 3)"
    )
    p.add_argument("--max-new-tokens", type=int, metavar="N", help="tokens per turn (both agents; config default 64)")
    p.add_argument("--max-context-tokens", type=int, metavar="N", help="context budget per agent (both agents)")
    p.add_argument(
        "--temperature",
        type=float,
        help="sampling temperature of both agents (config default 0.5: untrained SmolLM2 is incoherent at 1.0)",
    )
    p.add_argument("--single-agent", action="store_true", help="the baseline: one agent with every tool, no sub-agent")
    p.add_argument("--result-chars", type=int, default=240, metavar="N", help="show tool results up to N characters")
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch CPU threads (agents.torch_threads, default 1: on shared cores more can be ~10x slower)",
    )
    p.set_defaults(func=_run)
    return p
