"""The models of a training run's latest checkpoints, for `mgrpo eval --checkpoints RUN_DIR`.

RUN_DIR is a run's directory, `<run.dir>/<run.id>` (runs/default after `make run`). Each learner keeps
its checkpoints under RUN_DIR/checkpoints/<side>, each with a plain HF model directory beside
DeepSpeed's own files (learner/checkpoints.py); an agent loads that directory like any local model.
An agent that does not train (learners.<side>.frozen, or S under run.method main-only) has no learner,
so no checkpoint: it keeps its configured model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mgrpo_actors.config.node import NodeConfig
from mgrpo_actors.learner.checkpoints import Checkpoints

__all__ = ["CheckpointError", "CheckpointModel", "checkpoint_models", "with_models"]


class CheckpointError(ValueError):
    """A run directory lacks the checkpoint an agent needs (names the side and the directory)."""


@dataclass(frozen=True)
class CheckpointModel:
    """The model one agent gets from a run's checkpoints."""

    side: str  # "main" or "sub"
    model: str  # the latest checkpoint's HF directory, or the configured model of an agent that does not train
    tag: str | None  # the checkpoint's tag (e.g. "step3"); None: no checkpoint, the configured model is kept


def _side_model(run_dir: Path, side: str, config: NodeConfig) -> CheckpointModel:
    checkpoints = Checkpoints(run_dir / "checkpoints" / side)
    tag = checkpoints.latest()
    if tag is None:
        if not config.trains(side):
            return CheckpointModel(side, config.agent(side).model, None)
        raise CheckpointError(
            f"{checkpoints.directory} holds no checkpoint of the {side} agent (no 'latest' file); "
            f"an agent that did not train has none: set learners.{side}.frozen=true to evaluate "
            f"its configured model instead"
        )
    hf = checkpoints.hf_dir(tag)
    if not (hf / "config.json").is_file():
        raise CheckpointError(
            f"checkpoint {tag!r} of the {side} agent has no HF model directory: {hf} lacks config.json"
        )
    return CheckpointModel(side, str(hf), tag)


def checkpoint_models(run_dir: str | Path, config: NodeConfig, sides: Sequence[str]) -> list[CheckpointModel]:
    """The model of each of `sides` from the latest checkpoints under `run_dir`; CheckpointError if one is missing."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(
            f"no run directory {str(run_dir)!r} (a run's directory is <run.dir>/<run.id>, e.g. runs/default)"
        )
    return [_side_model(run_dir, side, config) for side in sides]


def with_models(config: NodeConfig, models: Sequence[CheckpointModel]) -> NodeConfig:
    """`config` with agents.<side>.model replaced by each model (a path is not re-parsed as YAML)."""
    agents = config.agents
    for entry in models:
        agent = dataclasses.replace(getattr(agents, entry.side), model=entry.model)
        agents = dataclasses.replace(agents, **{entry.side: agent})
    return dataclasses.replace(config, agents=agents)
