"""`load_node_config`: a command's NodeConfig, refused when it describes what this version cannot run yet.

Several sub-agent types (agents.subs, learners.subs) load and validate, and their sides, subjects and durables are
named (protocols/subjects.py); the roles, rollouts, aligners and learners still run the one default type. A config
with more than that is refused here, by every command that runs something, rather than half run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mgrpo_actors.config.loader import ConfigError, load_config
from mgrpo_actors.config.node import NodeConfig
from protocols import DEFAULT_SUB_TYPE

__all__ = ["load_node_config", "refuse_unrunnable"]


def refuse_unrunnable(config: NodeConfig) -> NodeConfig:
    """`config`, or ConfigError naming what this version does not run."""
    if config.sub_types != (DEFAULT_SUB_TYPE,):
        raise ConfigError(
            f"agents.subs describes sub-agent types {', '.join(config.sub_types)}: their config loads and validates, "
            "but this version's roles, rollouts, aligners and learners run one sub-agent type (agents.sub): "
            "leave agents.subs and learners.subs empty"
        )
    return config


def load_node_config(path: str | Path | Sequence[str | Path] | None, overrides: list[str] | None = None) -> NodeConfig:
    """The NodeConfig of files `path` and `overrides` (config/loader.py load_config), refused by refuse_unrunnable."""
    paths = [path] if isinstance(path, (str, Path)) else list(path or [])
    return refuse_unrunnable(load_config(NodeConfig, paths, overrides))
