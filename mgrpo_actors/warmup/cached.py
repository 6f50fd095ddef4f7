"""The warm start `mgrpo run` takes when `warmup.steps` > 0: the supervised format warm-up (web.py) done once
per machine and kept in the model cache (models/cache.py), then named as the agents' models.

The cache key covers everything the warmed weights depend on: the models (their spec and the files they
resolve to), the method (which agents), the tools and the rollout settings the oracle's episodes are written
with, and the warm-up's own settings. Any change builds a new warm start; an unchanged config reuses it, so a
second `make run` starts RL at once. The warm-up shows the model gold answers of train-split questions, which
is why it is a stage of its own (stage 0), said so by the run, and never counted as RL.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mgrpo_actors.config import NodeConfig, to_dict
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.config.warmup import WebWarmupConfig
from mgrpo_actors.envs.questions import QuestionConfig
from mgrpo_actors.log import get_logger
from mgrpo_actors.models.cache import build_resumable, cache_root, left_by_interrupted_build
from mgrpo_actors.models.loader import resolve_model_dir
from mgrpo_actors.runtime.compute import on_compute_thread_until

__all__ = [
    "WarmStart",
    "agent_settings",
    "loss_summary",
    "resolve_warm_start",
    "tools_settings",
    "warm_start",
    "warm_start_dir",
    "with_warm_start",
]

log = get_logger(__name__)

# Bump when the warm-up's recipe (oracle episodes, loss, saving) changes, so an old warm start is not reused.
_RECIPE_VERSION = 2  # 2: attention in fp32 and the output layer on learnt positions (supervised.py)


@dataclass(frozen=True)
class WarmStart:
    """The warmed-up models of a run and how they came to be."""

    models: dict[str, str]  # side -> HF directory
    built: bool  # True: built by this call; False: reused from the cache
    seconds: float  # the build's seconds (as recorded when it was built)
    record: dict  # warmup.json: settings, episodes, tokens and losses per agent


def model_files_identity(spec: str) -> list:
    """The files a model spec resolves to, as (name, size, mtime): a rebuilt model changes the key."""
    directory = resolve_model_dir(spec)
    return [
        [path.name, path.stat().st_size, int(path.stat().st_mtime)]
        for path in sorted(directory.iterdir())
        if path.is_file()
    ]


# Agent settings the oracle's episodes do not depend on (it writes its turns; it does not sample or run an engine).
_NOT_IN_EPISODES = ("model", "engine", "dtype", "device", "temperature", "top_p", "top_k", "vllm")


# Agent settings added after caches were built, each None unless a sub-agent type of agents.subs sets it: left out of
# the keys while unset, so the warm starts and pool probes already cached stay valid.
_LATER_SETTINGS = ("description", "expert_judge")


def agent_settings(agent: AgentConfig) -> dict:
    """`agent` as a cache key holds it: its fields, those of _LATER_SETTINGS only when set."""
    return {key: value for key, value in to_dict(agent).items() if not (key in _LATER_SETTINGS and value is None)}


def _episode_settings(agent: AgentConfig) -> dict:
    return {key: value for key, value in agent_settings(agent).items() if key not in _NOT_IN_EPISODES}


# Warm-up settings added after caches were built: left out of the keys while at their defaults (the warm-up then
# computes as before), so the warm starts already cached stay valid.
_LATER_WARMUP_SETTINGS = (
    "worlds",
    "all_tokens",
    "pages",
    "final_turns",
    "micro_batch",
    "lr_ramp_steps",
    "lr_decay",
    "max_grad_norm",
    "sub_steps",
    "copy_steps",
    "copies",
)
_LATER_WARMUP_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(WebWarmupConfig) if f.name in _LATER_WARMUP_SETTINGS
}


def tools_settings(config: NodeConfig) -> dict:
    """The tools section as a cache key holds it: tools.web_questions (added later) only when not the default."""
    default = ("web_questions", QuestionConfig.num_questions)
    return {key: value for key, value in to_dict(config.tools).items() if (key, value) != default}


# How a build is carried out, not what it builds: never in the key (a build resumed with another value is the same).
_NOT_IN_KEY = ("checkpoint_seconds",)


def _warmup_settings(config: NodeConfig) -> dict:
    settings = dataclasses.asdict(config.warmup)
    if not config.warmup_trains_sub or settings["sub_steps"] == settings["steps"]:
        settings["sub_steps"] = 0  # no S to train, or S's count is `steps`: the same build as without it
    return {
        key: value
        for key, value in settings.items()
        if _LATER_WARMUP_DEFAULTS.get(key, object()) != value and key not in _NOT_IN_KEY
    }


def _model_spec(spec: str) -> str:
    """A model spec as the key holds it: a link to a local directory (`mgrpo warmup --reuse`'s) by where it leads,
    so the same model named through two links is one key; any other spec as written (the keys built before)."""
    return os.path.realpath(spec) if os.path.islink(spec) else spec


def warm_start_dir(config: NodeConfig) -> Path:
    """Where the warm start of `config` is (or will be) cached."""
    sides = config.sides
    key = {
        "recipe": _RECIPE_VERSION,
        "method": config.run.method,
        "models": {side: _model_spec(config.agent(side).model) for side in sides},
        "files": {side: model_files_identity(config.agent(side).model) for side in sides},
        "tools": tools_settings(config),
        "agents": {side: _episode_settings(config.agent(side)) for side in sides},
        "judges": [config.agents.correct_judge, config.agents.expert_judge],
        "rewards": to_dict(config.algo.rewards),
        "warmup": _warmup_settings(config),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return cache_root() / "warmups" / f"{config.run.method}-{digest}"


def warm_start(
    config: NodeConfig,
    progress: Callable[[str, int, float], None] | None = None,
    waiting: Callable[[], None] | None = None,
) -> WarmStart:
    """The run's warm start: built into the cache on first use (`config.warmup.steps` >= 1), reused after; an
    interrupted build goes on where it was (models/cache.py build_resumable). While another process builds it,
    `waiting()` is called about once a second (it may raise to give up)."""
    from mgrpo_actors.warmup.web import warm_up_agents  # torch and transformers: imported on use

    target = warm_start_dir(config)  # warm_up_agents refuses warmup.steps < 1
    built = []

    def build(partial: Path) -> None:
        built.append(warm_up_agents(config, config.warmup, partial, progress, resume=True))

    said = []

    def wait() -> None:
        if not said:
            log.warning("waiting for another process building this warm start", target=str(target))
            said.append(target)
        if waiting is not None:
            waiting()

    # resumable: the key holds every setting the weights depend on, so what an interrupted build saved is of this one
    build_resumable(target, build, wait)
    record = json.loads((target / "warmup.json").read_text())
    return WarmStart(
        # the sides the warm-up built: M and S (or the single agent); other sub-agent types keep their models
        models={side: str(target / side) for side in config.sides if side in record.get("agents", {})},
        built=bool(built),
        seconds=float(record.get("seconds", 0.0)),
        record=record,
    )


def with_warm_start(config: NodeConfig, start: WarmStart) -> NodeConfig:
    """`config` with its agents' models replaced by the warmed-up ones and `warmup.steps` 0 (done: whatever
    reads this config, a child process included, starts from those models and never warms them up again)."""
    agents = config.agents
    for side, directory in start.models.items():
        agents = dataclasses.replace(agents, **{side: dataclasses.replace(getattr(agents, side), model=directory)})
    return dataclasses.replace(config, agents=agents, warmup=dataclasses.replace(config.warmup, steps=0, sub_steps=0))


def resolve_warm_start(
    config: NodeConfig, say: Callable[[str], None], progress: Callable[[str, int, float], None] | None = None
) -> tuple[NodeConfig, WarmStart | None]:
    """`config` as the run starts it: with `warmup.steps` > 0, the warm start built or reused (said through
    `say`, losses included) and named as the agents' models; otherwise `config` unchanged and None."""
    cfg = config.warmup
    if cfg.steps < 1:
        return config, None
    target = warm_start_dir(config)
    steps = cfg.steps_said(with_sub=config.warmup_trains_sub)
    models = ", ".join(f"{side} {config.agent(side).model}" for side in config.sides)
    if not (target / "warmup.json").is_file():
        resumed = " (an interrupted build of it goes on where it was)" if left_by_interrupted_build(target) else ""
        say(
            f"warm-up (stage 0, supervised, before RL; once, then cached): {models}, {steps} × "
            f"{cfg.batch_size} samples each of {cfg.learns_from()}, lr {cfg.lr:g}, {cfg.dtype}; into {target}{resumed}"
        )
    stop = threading.Event()  # Ctrl-C while the compute thread warms up: it stops at its next step and cleans up

    def stopped() -> None:
        if stop.is_set():
            raise KeyboardInterrupt("the warm-up was interrupted")

    def progress_or_stop(side: str, step: int, loss: float) -> None:
        stopped()
        if progress is not None:
            progress(side, step, loss)

    # on the process's compute thread, if it has one (runtime/compute.py)
    start = on_compute_thread_until(stop.set, warm_start, config, progress_or_stop, stopped)
    took = f"built in {start.seconds:.0f} s"
    supervised = cfg.steps_said("supervised ", with_sub=config.warmup_trains_sub)
    verb = took if start.built else f"reused from {target} ({took})"
    say(f"warm start {verb}: {supervised}, loss {loss_summary(start)}; RL starts from it")
    return with_warm_start(config, start), start


def loss_summary(start: WarmStart) -> str:
    """Each agent's loss over the warm-up, first step to last, e.g. "main 0.248 → 0.060, sub 0.444 → 0.243"; on the
    episodes, from the first step after the copying practice (warmup.copy_steps), whose loss is another task's."""
    practice = start.record.get("settings", {}).get("copy_steps", 0)
    parts = []
    for side, agent in start.record.get("agents", {}).items():
        losses = (agent.get("losses") or [])[practice:] or [float("nan")]
        parts.append(f"{side} {losses[0]:.3f} → {losses[-1]:.3f}")
    return ", ".join(parts)
