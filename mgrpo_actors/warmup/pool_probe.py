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

from mgrpo_actors.agents.setup import agent_tools, load_agent, load_task_questions, rollout_config
from mgrpo_actors.config import NodeConfig, to_dict
from mgrpo_actors.controller.questions import question_pool
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.evaluation.runner import outcome_of
from mgrpo_actors.models.cache import cache_root
from mgrpo_actors.rollout.local import run_rollout_groups, run_single_agent_groups
from mgrpo_actors.runtime.compute import on_compute_thread_until
from mgrpo_actors.runtime.disk import atomic_write_text
from mgrpo_actors.warmup.cached import model_files_identity

__all__ = ["PROBE_SEED_OFFSET", "PoolProbe", "ProbedQuestion", "choose_pool", "probe_pool", "resolve_pool"]

# The probe samples with run.seed + this: never the seeds of the run's own steps.
PROBE_SEED_OFFSET = 7919
_RECIPE_VERSION = 1  # bump when what the probe does changes: older cached outcomes are not reused


@dataclass(frozen=True)
class ProbedQuestion:
    """One candidate: how many of its probe rollouts M answered right (full credit from the judge, as the run's
    per-question table counts)."""

    id: str
    correct: int
    rollouts: int

    @property
    def mixed(self) -> bool:
        """Answered sometimes but not always: its rollouts' rewards differ, so it has advantages to learn from."""
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
        raise ValueError(f"cannot choose {size} questions from {len(probed)} candidates")

    def rank(i: int) -> tuple[bool, float, int]:
        q = probed[i]
        return (not q.mixed, abs(q.correct / q.rollouts - 0.5), i)

    keep = sorted(sorted(range(len(probed)), key=rank)[:size])
    return [probed[i].id for i in keep]


def _candidates(config: NodeConfig) -> list[Question]:
    pipeline = config.pipeline
    stage = pipeline.one_stage
    assert stage is not None  # PipelineConfig refuses a probe in a curriculum of two stages
    training = load_task_questions(pipeline, config.tools).training(pipeline, stage=stage)
    return question_pool(training, pipeline.probe_candidates, config.run.seed)


def _cache_path(config: NodeConfig, candidates: Sequence[Question]) -> Path:
    key = {
        "recipe": _RECIPE_VERSION,
        "method": config.run.method,
        "agents": {side: to_dict(config.agent(side)) for side in config.sides},
        "files": {side: model_files_identity(config.agent(side).model) for side in config.sides},
        "tools": to_dict(config.tools),
        "judges": [config.agents.correct_judge, config.agents.expert_judge],
        "rewards": to_dict(config.algo.rewards),
        "candidates": [question.id for question in candidates],
        "rollouts": config.pipeline.pool_probe_rollouts,
        "seed": config.run.seed,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return cache_root() / "pool-probes" / f"{digest}.json"


def _probe(config: NodeConfig, candidates: Sequence[Question]) -> list[ProbedQuestion]:
    """Every candidate rolled out pool_probe_rollouts times, as one generate batch on each agent's engine."""
    agents, rollouts = config.agents, config.pipeline.pool_probe_rollouts
    main = load_agent(agents.main)
    tools = agent_tools(config.tools, main, agents.main.max_new_tokens_per_turn)
    cfg = rollout_config(agents, config.algo)
    seed = config.run.seed + PROBE_SEED_OFFSET
    if "sub" in config.sides:
        groups = run_rollout_groups(candidates, rollouts, main, load_agent(agents.sub), tools, cfg, seed=seed)
    else:
        groups = run_single_agent_groups(candidates, rollouts, main, tools, cfg, seed=seed)
    probed = [
        ProbedQuestion(
            question.id,
            sum(outcome_of(question.id, rollout).correct >= 1.0 for rollout in group.rollouts),
            len(group.rollouts),
        )
        for question, group in zip(candidates, groups, strict=True)
    ]
    del main, groups
    gc.collect()  # the run loads its own engines next
    return probed


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


def resolve_pool(config: NodeConfig, say: Callable[[str], None]) -> NodeConfig:
    """`config` as the run starts it: with `pipeline.pool_probe_rollouts` > 0 (and no explicit question_ids), its
    pool chosen by the probe (on the process's compute thread, if it has one), said through `say`, and set as
    `pipeline.question_ids`; otherwise `config` unchanged."""
    pipeline = config.pipeline
    if not pipeline.pool_probe_rollouts or pipeline.question_ids is not None:
        return config
    probe = on_compute_thread_until(None, probe_pool, config)
    mixed = sum(q.mixed for q in probe.probed)
    chosen = {q.id: q for q in probe.probed if q.id in probe.pool}
    took = f"{probe.seconds:.0f} s" + (", reused from the cache" if probe.cached else "")
    say(
        f"pool probe (before RL; once, then cached): {len(probe.probed)} candidate questions × "
        f"{pipeline.pool_probe_rollouts} rollouts by the starting models ({took}); {mixed} answered sometimes but "
        f"not always; pool: " + ", ".join(f"{qid} {chosen[qid].correct}/{chosen[qid].rollouts}" for qid in probe.pool)
    )
    if mixed < pipeline.question_pool:
        say(
            f"  only {mixed} of the candidates had rollouts that differ: the pool's other "
            f"{pipeline.question_pool - mixed} give the learners nothing until their rollouts do"
        )
    return replace(config, pipeline=replace(pipeline, question_ids=list(probe.pool)))
