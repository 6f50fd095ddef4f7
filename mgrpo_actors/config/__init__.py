"""Typed configuration: dataclasses with a docstring per field (the one source of deploy/configs/default.yaml and
docs/reference/config.md: reference.py), loaded from YAML, `--set a.b=v` overrides."""

from mgrpo_actors.config.loader import ConfigError, apply_overrides, from_dict, load_config, to_dict
from mgrpo_actors.config.node import LogConfig, NatsConfig, NodeConfig, RunConfig, ToolsConfig
from mgrpo_actors.config.runnable import load_node_config

__all__ = [
    "ConfigError",
    "LogConfig",
    "NatsConfig",
    "NodeConfig",
    "RunConfig",
    "ToolsConfig",
    "apply_overrides",
    "from_dict",
    "load_config",
    "load_node_config",
    "to_dict",
]
