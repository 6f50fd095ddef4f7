"""`mgrpo warmup`'s work: the optional supervised warm-up of small models (stage 0) on the synthetic web, before RL
(issue: "an optional short supervised format warm-up for very small models, documented as such").

Untrained SmolLM2-135M rarely writes a fully valid episode, so most of its groups carry no advantage
and RL has little to learn from (docs/getting-started.md, `make run`). This fine-tunes each agent on the oracle's worked
episodes of train questions (oracle.py: real tools, real prompts, real trajectories; the loss on the agent's own
tokens; one-fact lookups by default, `warmup.kinds` adds questions over several named entities), then saves each as a
local HF directory a run names as its model. It teaches the format and the tool protocol; it shows the gold answers
of the training questions it uses, which is why it draws them from the train split only and why it is a documented,
optional stage rather than part of M-GRPO.

For a model trained from scratch (tiny:web-*, thousands of steps: a pretraining), `warmup.worlds` adds the train
episodes of other synthetic webs, learnt on every token with `warmup.all_tokens`, and `warmup.pages` their pages. The
run's own web gives its train episodes' agent tokens only: nothing of its pages, which hold the facts of its
validation and test questions, is learnt.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from mgrpo_actors.agents.setup import rollout_config, synthetic_web
from mgrpo_actors.agents.trajectory import TokenTrajectory
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.config.warmup import WebWarmupConfig
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.log import get_logger
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.runtime.disk import atomic_write_text
from mgrpo_actors.warmup.checkpoint import TrainingCheckpoint
from mgrpo_actors.warmup.copying import CopyRuns, copied_share
from mgrpo_actors.warmup.oracle import oracle_demonstrations, single_page
from mgrpo_actors.warmup.supervised import TextSample, WarmupConfig, final_turn_only, save_warmed, warm_up_trajectories

__all__ = ["warm_up_agents", "warmup_questions"]

log = get_logger(__name__)


def warmup_questions(train: Sequence[Question], cfg: WebWarmupConfig) -> list[Question]:
    """The first `cfg.questions` train questions the oracle can work, of `cfg.kinds` taken in turn (one of the
    first kind, one of the second, …, while each lasts)."""
    by_kind = [[q for q in train if q.kind == kind and single_page(q)] for kind in cfg.kinds]
    in_turn = (q for row in itertools.zip_longest(*by_kind) for q in row if q is not None)
    return list(itertools.islice(in_turn, cfg.questions))


def warm_up_agents(
    config: NodeConfig,
    cfg: WebWarmupConfig,
    out: Path,
    progress: Callable[[str, int, float], None] | None = None,
    resume: bool = False,
) -> dict[str, Path]:
    """Warm up (`cfg.steps` >= 1) the run's agents (`config.agents.main`/`sub`; the single agent alone under
    run.method: single-agent) and save each under `out/<side>`; returns {side: HF directory}. Writes
    `out/warmup.json` (settings, episode counts, losses, seconds). `resume` is for an `out` kept for these very
    settings (the model cache's, cached.py): a side finished there before is kept as it is (`out/.<side>.json` marks
    it), and one interrupted resumes from its checkpoint (`out/.<side>.checkpoint.pt`, every
    `cfg.checkpoint_seconds`; checkpoint.py)."""
    if cfg.steps < 1:
        raise ValueError(f"a warm-up needs steps >= 1, got {cfg.steps}")
    single = not config.warmup_trains_sub
    own = config.agents.main.tools
    if single and own is not None and not {"search", "visit"} <= set(own):
        raise ValueError(
            f"the warm-up's episodes search and visit the built-in web, but agents.main.tools is {own} "
            "(plain GRPO has no tool protocol to warm up)"
        )
    if cfg.worlds > 1 and config.tools.pages is not None:
        raise ValueError(
            f"warmup.worlds {cfg.worlds} works the questions of other synthetic webs, but tools.pages serves your own "
            "documents: use warmup.worlds 1"
        )
    specs = (
        {"main": config.agents.main.model}
        if single
        else {"main": config.agents.main.model, "sub": config.agents.sub.model}
    )
    loaded = {side: load_model(spec) for side, spec in specs.items()}
    started = time.perf_counter()
    tokenizers = (loaded["main"][1], None if single else loaded["sub"][1])
    episodes: dict[str, list[TokenTrajectory | TextSample]] = {"main": [], "sub": []}
    finals: dict[str, list[TokenTrajectory]] = {"main": [], "sub": []}  # other worlds' episodes, last turn learnt
    questions, other_pages = 0, []
    for seed in range(config.tools.web_seed, config.tools.web_seed + cfg.worlds):
        tools = dataclasses.replace(config.tools, web_seed=seed)  # the run's web first, then the other worlds
        web = synthetic_web(tools)
        worked = warmup_questions(web.splits["train"], cfg)
        if not worked:
            raise ValueError(
                f"the synthetic web of seed {seed} has no train questions of kinds {cfg.kinds} "
                "(raise tools.web_entities)"
            )
        world = oracle_demonstrations(worked, *tokenizers, tools, rollout_config(config.agents, config.algo))
        other = seed != config.tools.web_seed
        for side, made in (("main", world.main), ("sub", world.sub)):
            # every token of another world's episodes; the run's own keep the agent's tokens only, so no page of the
            # run's web (which holds its validation and test questions' facts) is learnt
            episodes[side] += [TextSample(t.token_ids) for t in made] if cfg.all_tokens and other else made
            finals[side] += [final_turn_only(t) for t in made] if cfg.final_turns and other else []
        other_pages += web.pages if other and cfg.pages else []
        questions += len(worked)
    record: dict = {
        "settings": asdict(cfg),
        "method": config.run.method,
        "models": specs,
        "questions": questions,
        "agents": {},
    }
    dirs = {}
    prepared = time.perf_counter() - started
    for side, (model, tokenizer) in loaded.items():
        finished, saved = out / f".{side}.json", out / f".{side}.checkpoint.pt"
        kept = _finished_side(finished) if resume and (out / side).is_dir() else None
        if kept is not None:
            record["agents"][side], dirs[side] = kept, out / side
            saved.unlink(missing_ok=True)  # left by a build stopped between marking the side and removing it
            log.warning("warm-up kept from an earlier attempt", side=side, steps=len(kept["losses"]))
            continue
        trajectories = episodes[side]
        if not trajectories:
            raise ValueError(
                f"the oracle produced no valid {side} episode: "
                "check the agents' budgets (max_turns, max_context_tokens)"
            )
        log.info(
            "warm-up starts", side=side, episodes=len(trajectories), tokens=sum(len(t.token_ids) for t in trajectories)
        )
        # the section's settings the supervised loop takes, under the same names; S's own count of steps
        same_names = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(WarmupConfig)}
        warmup = WarmupConfig(**{**same_names, "steps": cfg.steps_of(side)})
        pages = [TextSample(np.asarray(tokenizer(page.text)["input_ids"])) for page in other_pages]
        checkpoint = TrainingCheckpoint(saved, cfg.checkpoint_seconds) if resume else None
        pool = _copy_runs(trajectories, cfg.seed)  # the practice's samples; its held-out ones measure copied_share
        copies = pool if cfg.copy_steps or cfg.copies else ()
        done = warm_up_trajectories(
            model,
            trajectories,
            warmup,
            None if progress is None else lambda step, loss, side=side: progress(side, step, loss),
            compute_dtype=cfg.dtype,
            texts=pages,
            text_share=cfg.pages,
            finals=finals[side],
            final_share=cfg.final_turns,
            checkpoint=checkpoint,
            copies=copies,
            copy_share=cfg.copies,
        )
        dirs[side] = save_warmed(model, tokenizer, out / side)
        copied = copied_share(model, pool.held_out())
        log.info("warm-up copies", side=side, copied_share=round(copied, 3))
        record["agents"][side] = {
            "episodes": len(trajectories),
            "tokens": sum(len(t.token_ids) for t in trajectories),
            "pages": len(pages),
            "final_turns": len(finals[side]),
            "losses": done.losses,
            "seconds": done.seconds,  # its training's compute, every attempt's
            "resumed_at": done.resumed_at,  # the steps an interrupted warm-up went on from (checkpoint.py)
            "copied_share": copied,  # of held-out copying samples' learnt ids, the share it predicts (copying.py)
            "dir": str(dirs[side]),
        }
        if checkpoint is not None:  # the side is done: marked after its model is saved, then its checkpoint goes
            atomic_write_text(finished, json.dumps(record["agents"][side]), "warm-up side record")
            checkpoint.remove()
    # the episodes' preparation (this attempt's) and each side's training (every attempt's)
    record["seconds"] = prepared + sum(agent.get("seconds", 0.0) for agent in record["agents"].values())
    (out / "warmup.json").write_text(json.dumps(record, indent=2))
    return dirs


def _copy_runs(trajectories: Sequence[TokenTrajectory | TextSample], seed: int) -> CopyRuns:
    """Copying practice (copying.py) over the ids of `trajectories`, opened by the id most of them open with."""
    start = collections.Counter(int(t.token_ids[0]) for t in trajectories).most_common(1)[0][0]
    return CopyRuns(np.concatenate([t.token_ids for t in trajectories]), start, seed)


def _finished_side(marker: Path) -> dict | None:
    """The record of a side an earlier attempt finished, or None (not finished, or its marker unreadable)."""
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
