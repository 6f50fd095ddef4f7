"""`load_node_config`: a command's NodeConfig, refused when it describes what that command cannot run yet.

Several sub-agent types (agents.subs, learners.subs) run in the pipeline: `mgrpo run` and `mgrpo-node`, each type
with its own sub-agents, aligner and learner. The commands that roll out in one process (`mgrpo rollout`, `mgrpo
eval`, `mgrpo compare`, `mgrpo warmup`), the supervised warm start and the pool probe still run the one default type
(agents.sub): a config with agents.subs is refused there, by name, rather than run with agents.sub in its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mgrpo_actors.config.loader import ConfigError, load_config
from mgrpo_actors.config.node import NodeConfig

__all__ = ["PIPELINE_COMMANDS", "load_node_config", "refuse_unrunnable"]

# The commands that run every sub-agent type of agents.subs.
PIPELINE_COMMANDS = ("mgrpo run", "mgrpo-node")


def refuse_unrunnable(config: NodeConfig, command: str) -> NodeConfig:
    """`config`, or ConfigError naming what `command` does not run of it."""
    if not config.agents.subs:
        return config
    types = f"agents.subs describes sub-agent types {', '.join(config.sub_types)}"
    if command not in PIPELINE_COMMANDS:
        raise ConfigError(
            f"{types}; {command} runs the one default sub-agent type (agents.sub) in this version: run the types "
            f"with {' or '.join(PIPELINE_COMMANDS)}"
        )
    if config.warmup.steps > 0:
        raise ConfigError(f"{types}; the supervised warm start writes the default type's episodes: set warmup.steps 0")
    if config.pipeline.pool_probe_rollouts > 0:
        raise ConfigError(f"{types}; the pool probe rolls out the default type: set pipeline.pool_probe_rollouts 0")
    return config


def load_node_config(
    path: str | Path | Sequence[str | Path] | None, overrides: list[str] | None, command: str
) -> NodeConfig:
    """The NodeConfig of files `path` and `overrides` (config/loader.py load_config) for `command`, refused by
    refuse_unrunnable."""
    paths = [path] if isinstance(path, (str, Path)) else list(path or [])
    return refuse_unrunnable(load_config(NodeConfig, paths, overrides), command)
