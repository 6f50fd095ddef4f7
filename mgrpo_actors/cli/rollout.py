"""`mgrpo rollout`: one question through the main agent and its sub-agents (or the single agent), on CPU,
with the transcript of every agent (tool calls, tool results, answers) and the reward parts.

    mgrpo rollout                                   # SmolLM2 as M and as S, train question 0
    mgrpo rollout --question-index 7 --k 2 --seed 3
    mgrpo rollout --main tiny:main --sub tiny:sub   # tiny random models: seconds, mostly malformed turns
    mgrpo rollout --single-agent                    # the baseline: one agent with every tool

M and S are separate model instances even when they are the same model (in real use they are different
LLMs). Each trajectory is built token-in/token-out exactly as for training; this command only prints it.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from mgrpo_actors.envs.dataset import SPLITS
from mgrpo_actors.envs.world import WorldConfig

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
    p.add_argument("--main", default="smollm2", metavar="SPEC", help="main agent's model: smollm2, tiny:main, or a local HF dir")
    p.add_argument("--sub", default="smollm2", metavar="SPEC", help="sub-agent's model (a separate instance)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--question-index", type=int, default=0, metavar="N", help="question N of the split (default 0)")
    which.add_argument("--question-id", metavar="ID", help="the question with this id")
    p.add_argument("--split", default="train", choices=SPLITS, help="split to pick the question from")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--web-seed", type=int, default=0, help="seed of the synthetic web (default 0)")
    p.add_argument("--entities", type=int, default=WorldConfig.num_entities, help="entities of the synthetic web")
    p.add_argument("--k", type=int, default=1, help="rollouts of the question (default 1)")
    p.add_argument("--max-turns", type=int, default=3, metavar="N", help="turns per agent (default 3; training uses 20)")
    p.add_argument("--max-new-tokens", type=int, default=64, metavar="N", help="tokens per turn (default 64)")
    p.add_argument("--max-context-tokens", type=int, default=4096, metavar="N", help="context budget per agent")
    p.add_argument("--temperature", type=float, default=0.5,
                   help="sampling temperature (default 0.5: untrained SmolLM2 is incoherent at training's 1.0)")
    p.add_argument("--single-agent", action="store_true", help="the baseline: one agent with every tool, no sub-agent")
    p.add_argument("--result-chars", type=int, default=240, metavar="N", help="show tool results up to N characters")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="torch CPU threads (default 1: on cores shared with other work, more can be ~10x slower)")
    p.set_defaults(func=_run)
    return p
