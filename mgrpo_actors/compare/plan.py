"""What `mgrpo compare` runs: one stage-1 warm start per agent layout (M + S, or the single agent), then
every method for the same number of stage-2 steps from that start, each with the same seeds and
budget, exporting its models every `eval_every` steps for evaluation (issue: "runs the modes with the
same seeds and budget, evaluates every N steps").

Each run is `mgrpo run` with config overrides; this module only computes the overrides, so the plan can
be checked without running anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mgrpo_actors.config.learner import LearnerConfig

__all__ = ["METHODS", "CompareConfig", "MethodRun", "layout_of", "method_runs", "stage1_overrides", "trained_sides"]

# Method name -> the config overrides that make it (docs/method.md §Training schedule).
METHODS: dict[str, tuple[str, ...]] = {
    "m-grpo": ("run.method=m-grpo",),
    "main-only": ("run.method=main-only",),
    "single-agent": ("run.method=single-agent",),
    # the paper's unsynchronised condition (alignment/unaligned.py build_fifo_sub_batch)
    "m-grpo-unaligned": ("run.method=m-grpo", "algo.alignment.mode=none"),
}


@dataclass(frozen=True)
class CompareConfig:
    """The comparison's budget; every method gets the same."""

    methods: tuple[str, ...] = tuple(METHODS)  # which methods to run, in this order
    steps: int = 6  # stage-2 training steps per method
    eval_every: int = 2  # evaluate each method's models every N steps (and at step 0, the shared start)
    # steps of the shared stage-1 warm start (one-fact lookups, docs/method.md §Training schedule); 0 = none
    stage1_steps: int = 2
    eval_questions: int = 16  # validation questions per evaluation
    eval_runs: int = 2  # sampled runs per evaluation (the spread comes from them)
    eval_batch: int = 16  # questions an evaluation rolls out together (`mgrpo eval --batch`)
    # with a warm-up: the single agent's starts from the M + S layout's warmed M (the same model kind) and takes this
    # many steps on its own layout's episodes; 0 = its own warm-up from the configured model ([ours]: a warm-up
    # costs as much as the runs on 2 cores, docs/benchmarks.md)
    single_from_main: int = 0
    # the config's warmup.copy_steps: M's warm-up practises copying, so the single agent's from it does not again
    warmup_copy_steps: int = 0
    # steps run at once, each on its own share of the cores (compare/schedule.py); no step's command holds it, but
    # a step's threads follow its cores (a learner's default, the warm-up's), so its floats may round otherwise
    parallel: int = 1
    # run.seed of each method's runs, one run per method and seed (their evaluations sample with the same seed);
    # the first also seeds the shared warm starts and their evaluation
    seeds: tuple[int, ...] = (0,)
    extra: tuple[str, ...] = field(default_factory=tuple)  # overrides applied to every run and evaluation (--set)

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(f"unknown or no methods {unknown}; known: {', '.join(METHODS)}")
        for name in ("steps", "eval_every", "eval_questions", "eval_runs", "eval_batch", "parallel"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be one or more distinct seeds, got {list(self.seeds)}")
        if self.stage1_steps < 0:
            raise ValueError(f"stage1-steps must be >= 0, got {self.stage1_steps}")
        if self.single_from_main < 0:
            raise ValueError(f"single-from-main must be >= 0, got {self.single_from_main}")
        both = "single-agent" in self.methods and any(layout_of(m) == "multi" for m in self.methods)
        if self.single_from_main and not both:
            raise ValueError(
                "--single-from-main needs the single-agent method and one of M + S (m-grpo, main-only, "
                "m-grpo-unaligned) among the methods"
            )

    @property
    def eval_steps(self) -> list[int]:
        """The steps after which each method is evaluated: 0 (the start) and each step its learners export
        at (every eval_every, and the last: the learner's own schedule, LearnerConfig.export_steps)."""
        return [0, *LearnerConfig(export_every=self.eval_every).export_steps(self.steps)]


def trained_sides(method: str) -> tuple[str, ...]:
    """The agents a method trains (docs/method.md §Training schedule): both, or M only (main-only, and the single
    agent)."""
    return ("main", "sub") if method in ("m-grpo", "m-grpo-unaligned") else ("main",)


def layout_of(method: str) -> str:
    """ "single" for the single-agent method, "multi" (M delegating to S) for the others."""
    return "single" if method == "single-agent" else "multi"


@dataclass(frozen=True)
class MethodRun:
    """One method's stage-2 run with one seed."""

    method: str
    seed: int  # its run.seed
    run_id: str  # run.id (and the name of its directory under the comparison's run dir): <method>-seed<seed>
    overrides: tuple[str, ...]  # for `mgrpo run --set`


def _models(start: dict[str, str]) -> tuple[str, ...]:
    return tuple(f"agents.{side}.model={path}" for side, path in start.items())


def stage1_overrides(cfg: CompareConfig, layout: str, run_dir: str, start: dict[str, str]) -> tuple[str, ...]:
    """The stage-1 warm start of a layout from its `start` models ({side: model}): stage-1 questions only,
    both agents train (or the single agent), the result exported at its last step."""
    method = "single-agent" if layout == "single" else "m-grpo"
    return (
        *cfg.extra,
        *_models(start),
        f"run.method={method}",
        f"run.id=stage1-{layout}",
        f"run.dir={run_dir}",
        f"run.seed={cfg.seeds[0]}",
        f"pipeline.steps={cfg.stage1_steps}",
        f"pipeline.stage1_steps={cfg.stage1_steps}",
        *_exports(cfg.stage1_steps),
    )


def _exports(every: int) -> tuple[str, ...]:
    # Plain HF exports for the evaluations; no DeepSpeed checkpoints (GBs each, and nothing resumes here).
    return tuple(
        f"learners.{side}.{key}" for side in ("main", "sub") for key in (f"export_every={every}", "checkpoint_every=0")
    )


def method_runs(cfg: CompareConfig, starts: dict[str, dict[str, str]], run_dir: str) -> list[MethodRun]:
    """Every method's stage-2 runs, one per seed (method by method), from its layout's start models
    ({layout: {side: model}})."""
    runs = []
    for method in cfg.methods:
        for seed in cfg.seeds:
            run_id = f"{method}-seed{seed}"
            overrides = (
                *cfg.extra,
                *METHODS[method],
                f"run.id={run_id}",
                f"run.dir={run_dir}",
                f"run.seed={seed}",
                f"pipeline.steps={cfg.steps}",
                "pipeline.stage1_steps=0",
                *_models(starts[layout_of(method)]),
                *_exports(cfg.eval_every),
            )
            runs.append(MethodRun(method, seed, run_id, overrides))
    return runs
