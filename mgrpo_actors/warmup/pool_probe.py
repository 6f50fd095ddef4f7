"""The pool probe (`pipeline.pool_probe_rollouts`, docs/method.md §Training schedule): before RL, `mgrpo run` rolls
out each candidate question N times with the run's starting models and makes its `question_pool` of those they
answered sometimes but not always, nearest to half first.

Why: a group whose K rollouts all earn the same reward has no advantage, so a question the starting models answer
in every rollout, or in none, gives GRPO nothing to learn from (DAPO filters such groups batch by batch; a fixed
pool can be chosen once). The probe's rollouts are its own (seed `run.seed` + PROBE_SEED_OFFSET), so the run's first
steps measure the chosen questions afresh. The outcome is cached under the model cache, keyed by everything it
depends on (the models' files, the agents' settings, tools, judges, rewards, candidates, rollouts, seed), so a
second run starts RL at once.
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from mgrpo_actors.agents.setup import agent_tools, load_agent, load_task_questions, rollout_config
from mgrpo_actors.config import NodeConfig, to_dict
from mgrpo_actors.controller.questions import question_pool
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.models.cache import cache_root
from mgrpo_actors.rollout.local import run_rollout_groups, run_single_agent_groups
from mgrpo_actors.runtime.compute import on_compute_thread_until
from mgrpo_actors.runtime.disk import atomic_write_text
from mgrpo_actors.warmup.cached import agent_settings, model_files_identity, tools_settings

__all__ = [
    "POOL_FILE",
    "PROBE_SEED_OFFSET",
    "PoolProbe",
    "ProbedQuestion",
    "choose_pool",
    "kept_pool_path",
    "probe_pool",
    "resolve_pool",
]

# The probe samples with run.seed + this: never the seeds of the run's own steps.
PROBE_SEED_OFFSET = 7919
_RECIPE_VERSION = 1  # bump when what the probe does changes: older cached outcomes are not reused


@dataclass(frozen=True)
class ProbedQuestion:
    """One candidate: how many of its probe rollouts M answered right: full credit from the judge, as the run's
    per-question table and learning check count (QueryDone.correct_rollouts, rollout/main.py)."""

    id: str
    correct: int
    rollouts: int

    @property
    def mixed(self) -> bool:
        """Answered right sometimes but not always: its rollouts' rewards differ, so it has advantages to learn from."""
        return 0 < self.correct < self.rollouts


@dataclass(frozen=True)
class PoolProbe:
    """What the probe found and chose."""

    probed: list[ProbedQuestion]  # every candidate, in candidate (dataset) order
    pool: list[str]  # the chosen question ids, in candidate order
    seconds: float  # the probe's rollouts (as recorded when it ran)
    cached: bool  # True: reused from the cache


def choose_pool(probed: Sequence[ProbedQuestion], size: int) -> list[str]:
    """The ids of `size` candidates: those answered sometimes but not always first, nearest to half first (ties in
    candidate order); then, if too few were, the rest by the same rule. Returned in candidate order."""
    if size > len(probed):
        raise ValueError(
            f"the pool probe cannot choose pipeline.question_pool {size} questions from {len(probed)} candidates: "
            "the split at the run's levels holds fewer; lower question_pool"
        )

    def rank(i: int) -> tuple[bool, float, int]:
        q = probed[i]
        # 2 · |correct / rollouts - 1/2| as |2 · correct - rollouts| / rollouts: equal distances are equal floats
        # (|1/3 - 1/2| and |2/3 - 1/2| are not)
        return (not q.mixed, abs(2 * q.correct - q.rollouts) / q.rollouts, i)

    keep = sorted(sorted(range(len(probed)), key=rank)[:size])
    return [probed[i].id for i in keep]


def _candidates(config: NodeConfig) -> list[Question]:
    pipeline = config.pipeline
    stage = pipeline.one_stage
    assert stage is not None  # PipelineConfig refuses a probe in a curriculum of two stages
    training = load_task_questions(pipeline, config.tools).training(pipeline, stage=stage)
    return question_pool(training, pipeline.probe_candidates, config.run.seed)


def _settings(section: object | None) -> dict | None:
    return None if section is None else to_dict(section)


def _file_identity(path: str | None) -> list | None:
    """A file the outcome depends on, as (path, size, mtime): a rewritten dataset or pages file changes the key."""
    if path is None or path == "synthetic":
        return None
    stat = Path(path).stat()
    return [str(Path(path).resolve()), stat.st_size, int(stat.st_mtime)]


def _cache_path(config: NodeConfig, candidates: Sequence[Question]) -> Path:
    key = {
        "recipe": _RECIPE_VERSION,
        "method": config.run.method,
        "agents": {side: agent_settings(config.agent(side)) for side in config.sides},
        "files": {side: model_files_identity(config.agent(side).model) for side in config.sides},
        "tools": tools_settings(config),
        "judges": [config.agents.correct_judge, config.agents.expert_judge, _settings(config.agents.llm_judge)],
        "rewards": to_dict(config.algo.rewards),
        "dataset": [_file_identity(config.pipeline.dataset), _settings(config.pipeline.dataset_fields)],
        "pages": _file_identity(config.tools.pages),
        "candidates": [[q.id, q.question, list(q.answers)] for q in candidates],
        "rollouts": config.pipeline.pool_probe_rollouts,
        "seed": config.run.seed,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return cache_root() / "pool-probes" / f"{digest}.json"


def _probe(config: NodeConfig, candidates: Sequence[Question]) -> list[ProbedQuestion]:
    """Every candidate rolled out pool_probe_rollouts times, as one generate batch on each agent's engine."""
    agents, rollouts = config.agents, config.pipeline.pool_probe_rollouts
    seed = config.run.seed + PROBE_SEED_OFFSET
    models = [load_agent(agents.main)]
    tools = None  # its reason tool holds M's engine: dropped with the engines
    try:
        tools = agent_tools(config.tools, models[0], agents.main.max_new_tokens_per_turn)
        cfg = rollout_config(agents, config.algo)
        if "sub" in config.sides:
            models.append(load_agent(agents.sub))
            groups = run_rollout_groups(candidates, rollouts, models[0], models[1], tools, cfg, seed=seed)
        else:
            groups = run_single_agent_groups(candidates, rollouts, models[0], tools, cfg, seed=seed)
    finally:
        tools = None
        _free(models)
    return [
        ProbedQuestion(
            question.id, sum(rollout.main_score.r_correct >= 1.0 for rollout in group.rollouts), len(group.rollouts)
        )
        for question, group in zip(candidates, groups, strict=True)
    ]


def _free(models: list) -> None:
    """The probe's engines, gone before the run loads its own (a vLLM engine holds its GPU memory until closed)."""
    for model in models:
        close = getattr(model.engine, "close", None)
        if close is not None:
            close()
    models.clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def probe_pool(config: NodeConfig) -> PoolProbe:
    """The probe's outcome for `config` (its models as the run starts them): cached, or run now."""
    candidates = _candidates(config)
    path = _cache_path(config, candidates)
    if path.is_file():
        saved = json.loads(path.read_text())
        probed = [ProbedQuestion(**entry) for entry in saved["probed"]]
        return PoolProbe(probed, choose_pool(probed, config.pipeline.question_pool), saved["seconds"], cached=True)
    started = time.perf_counter()
    probed = _probe(config, candidates)
    seconds = time.perf_counter() - started
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"probed": [asdict(q) for q in probed], "seconds": seconds}
    atomic_write_text(path, json.dumps(record, indent=1), "pool probe")
    return PoolProbe(probed, choose_pool(probed, config.pipeline.question_pool), seconds, cached=False)


# Beside the run's directory (<run.dir>/<run.id>.question-pool.json), not in it: a fresh run clears its directory
# when its server starts (runtime/run_server.py), after the pool is chosen. The pool the run started with, which a
# resumed run keeps (the cache may be gone).
POOL_FILE = "question-pool.json"


def kept_pool_path(config: NodeConfig) -> Path:
    """Where the run keeps the pool it started with."""
    return Path(config.run.dir) / f"{config.run.id}.{POOL_FILE}"


def resolve_pool(config: NodeConfig, say: Callable[[str], None], resume: bool = False) -> NodeConfig:
    """`config` as the run starts it: with `pipeline.pool_probe_rollouts` > 0 (and no explicit question_ids), its
    pool chosen by the probe (on the process's compute thread, if it has one), said through `say`, kept in the
    run's directory and set as `pipeline.question_ids`; a resumed run takes the pool it started with. Otherwise
    `config` unchanged. ValueError when the dataset cannot fill the pool."""
    pipeline = config.pipeline
    if not pipeline.pool_probe_rollouts or pipeline.question_ids is not None:
        return config
    kept = kept_pool_path(config)
    if resume and kept.is_file():
        pool = json.loads(kept.read_text())["question_ids"]
        say(f"question pool as the run started it ({kept}): {', '.join(pool)}")
        return replace(config, pipeline=replace(pipeline, question_ids=pool))
    probe = on_compute_thread_until(None, probe_pool, config)
    mixed = sum(q.mixed for q in probe.probed)
    chosen = {q.id: q for q in probe.probed if q.id in probe.pool}
    took = f"{probe.seconds:.0f} s" + (", reused from the cache" if probe.cached else "")
    pool = ", ".join(f"{qid} {chosen[qid].correct}/{chosen[qid].rollouts}" for qid in probe.pool)
    say(
        f"pool probe (before RL; once, then cached): {len(probe.probed)} candidate questions × "
        f"{pipeline.pool_probe_rollouts} rollouts by the starting models ({took}); {mixed} answered right sometimes "
        f"but not always; pool: {pool}"
    )
    if mixed < pipeline.question_pool:
        say(
            f"  only {mixed} of the candidates had rollouts that differ: the pool's other "
            f"{pipeline.question_pool - mixed} give the learners nothing until their rollouts do"
        )
    kept.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(kept, json.dumps({"question_ids": probe.pool, "probed": [asdict(q) for q in probe.probed]}))
    return replace(config, pipeline=replace(pipeline, question_ids=list(probe.pool)))
