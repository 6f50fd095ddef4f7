"""Typed configuration of the M-GRPO math (rewards, advantages, alignment, objective, judge).

Every default names its source: "paper" (arXiv 2511.13288), "reference code" (the authors'
implementation, as summarised in docs/method.md) or "[ours]" (a choice docs/method.md marks ours).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal

StdKind = Literal["population", "unbiased"]
AlignmentMode = Literal["duplicate", "mask", "none", "none-per-step"]
RatioKind = Literal["token", "sequence", "sequence-mean"]
Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _require_weight(name: str, value: float) -> None:
    _require(
        isinstance(value, (int, float)) and math.isfinite(value) and value >= 0.0,
        f"{name} must be a finite number >= 0, got {value!r}",
    )


def _require_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    _require(value in choices, f"{name} must be one of {choices}, got {value!r}")


@dataclass(frozen=True)
class RewardConfig:
    """Reward weights, docs/method.md §Rewards."""

    alpha_format: float = 0.1
    """α1: weight of r_format in R_M (paper: 0.1)."""
    alpha_correct: float = 0.9
    """α2: weight of M's r_correct in R_M (paper: 0.9)."""
    beta_format: float = 0.1
    """β1: weight of S's own r_format in R_S (paper: 0.1)."""
    beta_correct: float = 0.4
    """β2: weight of M's r_correct (copied to every S call of the rollout) in R_S (paper: 0.4)."""
    beta_expert: float = 0.5
    """β3: weight of r_expert in R_S; folded into β2 when no expert scorer is configured (paper: 0.5)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            _require_weight(f"rewards.{f.name}", getattr(self, f.name))
        _require(self.alpha_format + self.alpha_correct > 0, "rewards: alpha_format + alpha_correct must be > 0")
        _require(
            self.beta_format + self.beta_correct + self.beta_expert > 0,
            "rewards: beta_format + beta_correct + beta_expert must be > 0",
        )


@dataclass(frozen=True)
class AdvantageConfig:
    """Group-relative advantages, docs/method.md §Group-relative advantages."""

    std: StdKind = "population"
    """Std convention: "population" divides by n, "unbiased" by n - 1 (docs/method.md default: population)."""
    eps: float = 1e-6
    """A group whose std is <= eps is degenerate and gets advantages 0 (docs/method.md default: 1e-6)."""

    def __post_init__(self) -> None:
        _require_choice("advantages.std", self.std, ("population", "unbiased"))
        _require(
            isinstance(self.eps, (int, float)) and math.isfinite(self.eps) and self.eps >= 0,
            f"advantages.eps must be a finite number >= 0, got {self.eps!r}",
        )


@dataclass(frozen=True)
class AlignmentConfig:
    """Trajectory alignment to a fixed D, docs/method.md §Trajectory alignment."""

    d: int | Literal["auto"] = 8
    """D, sub-trajectories per rollout after alignment, or "auto" to estimate it (paper: 8 with K = 8)."""
    mode: AlignmentMode = "duplicate"
    """"duplicate" fills short rollouts with their own sub-trajectories (paper); "mask" with placeholders;
    "none": no alignment, the paper's unsynchronised ablation as the reference code runs it: B·K·D sub samples
    first-in-first-out from a queue kept across steps (leftovers carried into the next step, at most B·K·D of
    them), advantages over consecutive chunks of K·D samples regardless of query; "none-per-step": no alignment,
    first-in-first-out from the step's own sub-trajectories only (leftovers dropped), one advantage group per
    query ([ours])."""
    quantile: float = 0.99
    """D: auto picks D with P(d_k <= D) >= quantile over the window (paper: P ≈ 0.99)."""
    window: int = 1024
    """D: auto looks at the last `window` observed d_k values ([ours])."""
    d_initial: int = 8
    """D used by D: auto before any d_k has been observed (paper: 8)."""
    d_min: int = 1
    """Lower bound on an estimated D; D = 0 would leave S without samples ([ours])."""
    d_max: int = 64
    """Upper bound on an estimated D, caps memory when a few rollouts call S very often ([ours])."""

    def __post_init__(self) -> None:
        _require(
            self.d == "auto" or (isinstance(self.d, int) and not isinstance(self.d, bool) and self.d >= 1),
            f"alignment.d must be an integer >= 1 or 'auto', got {self.d!r}",
        )
        _require_choice("alignment.mode", self.mode, ("duplicate", "mask", "none", "none-per-step"))
        _require(0.0 < self.quantile <= 1.0, f"alignment.quantile must be in (0, 1], got {self.quantile!r}")
        _require(self.window >= 1, f"alignment.window must be >= 1, got {self.window!r}")
        _require(self.d_min >= 1, f"alignment.d_min must be >= 1, got {self.d_min!r}")
        _require(self.d_min <= self.d_max, f"alignment.d_min ({self.d_min}) must be <= alignment.d_max ({self.d_max})")
        _require(
            self.d_min <= self.d_initial <= self.d_max,
            f"alignment.d_initial ({self.d_initial}) must be within [d_min, d_max] = [{self.d_min}, {self.d_max}]",
        )


@dataclass(frozen=True)
class ObjectiveConfig:
    """Clipped policy objective, docs/method.md §Objective."""

    eps_low: float = 0.2
    """Lower clip range: ρ is clipped at 1 - eps_low (reference code: 0.2)."""
    eps_high: float = 0.28
    """Upper clip range: ρ is clipped at 1 + eps_high, "clip-higher" (reference code: 0.28)."""
    ratio: RatioKind = "token"
    """"token" (reference code), "sequence" (paper; needs seq-mean-token-mean), "sequence-mean" (GSPO)
    ([ours]: token)."""
    aggregation: Aggregation = "token-mean"
    """How token losses become one number ([ours]: token-mean over the global batch)."""
    max_response_tokens: int | None = None
    """Dr.GRPO's constant length normaliser; required by seq-mean-token-sum-norm ([ours]: no default)."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to a frozen reference policy, by default each learner's starting weights
    (learners.<side>.reference); 0 turns it off and loads no reference (paper: no KL term)."""
    kl_estimator: KLEstimator = "k3"
    """KL estimator (Schulman's k1 / k2 / k3) used when kl_coef > 0 ([ours]: k3, non-negative)."""
    log_ratio_clamp: float = 20.0
    """Log-ratios are clamped to [-c, c] before exp() so one wild token cannot overflow ([ours]: 20)."""
    advantage_sign: int = 1
    """1 trains towards the reward; -1 flips every advantage, a control run that must not learn (catches
    sign, masking and weight-sync errors; [ours]: 1)."""
    recompute_old_logprobs: bool = False
    """π_old of the ratio is the learner's own logprobs at the pre-step weights instead of the engine's, for
    an engine that samples in another precision or kernel (agents.<side>.dtype bfloat16 against a float32
    learner, or vllm). With one optimizer step per batch these are the current forward's logprobs, detached:
    no extra forward pass; ρ is then 1 in value, so the clip and the ratio no longer correct for the
    engine's logprobs or a sample's age (tis_cap does) (verl recomputes them; [ours]: off, the engine's)."""
    tis_cap: float | None = None
    """Truncated importance sampling: each token's policy-gradient loss × min(π_learner_old / π_engine, C),
    detached, C = tis_cap (verl's rollout correction, TIS); π_learner_old is the learner's pre-step
    logprob, so it needs recompute_old_logprobs (refused without: the ratio would correct for the engine
    twice). None = off ([ours]: off)."""

    def __post_init__(self) -> None:
        _require(0.0 < self.eps_low < 1.0, f"objective.eps_low must be in (0, 1), got {self.eps_low!r}")
        _require(self.eps_high > 0.0, f"objective.eps_high must be > 0, got {self.eps_high!r}")
        _require_choice("objective.ratio", self.ratio, ("token", "sequence", "sequence-mean"))
        _require(
            self.advantage_sign in (1, -1), f"objective.advantage_sign must be 1 or -1, got {self.advantage_sign!r}"
        )
        _require_choice(
            "objective.aggregation", self.aggregation, ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
        )
        # docs/method.md §Objective: the paper's sequence ratio counts each sequence's loss once; any other
        # aggregation weights it by its length. sequence-mean takes any aggregation (objective.py says why).
        _require(
            self.ratio != "sequence" or self.aggregation == "seq-mean-token-mean",
            "objective.ratio: sequence requires objective.aggregation: seq-mean-token-mean "
            f"(each sequence's loss counted once, as in the paper), got objective.aggregation: {self.aggregation}",
        )
        if self.aggregation == "seq-mean-token-sum-norm":
            _require(
                isinstance(self.max_response_tokens, int) and self.max_response_tokens >= 1,
                "objective.max_response_tokens must be an integer >= 1 when aggregation is "
                f"seq-mean-token-sum-norm, got {self.max_response_tokens!r}",
            )
        _require_weight("objective.kl_coef", self.kl_coef)
        _require_choice("objective.kl_estimator", self.kl_estimator, ("k1", "k2", "k3"))
        _require(self.log_ratio_clamp > 0.0, f"objective.log_ratio_clamp must be > 0, got {self.log_ratio_clamp!r}")
        _require(
            isinstance(self.recompute_old_logprobs, bool),
            f"objective.recompute_old_logprobs must be true or false, got {self.recompute_old_logprobs!r}",
        )
        _require(
            self.tis_cap is None
            or (
                isinstance(self.tis_cap, (int, float))
                and not isinstance(self.tis_cap, bool)
                and math.isfinite(self.tis_cap)
                and self.tis_cap > 0
            ),
            f"objective.tis_cap must be a finite number > 0 or null (off), got {self.tis_cap!r}",
        )
        # Without recompute, ρ = π_θ / π_engine already carries the engine's logprobs: the TIS weight
        # π_learner_old / π_engine would apply the same correction a second time (a factor (π/π_engine)²).
        _require(
            self.tis_cap is None or self.recompute_old_logprobs,
            "objective.tis_cap needs objective.recompute_old_logprobs: true (without it the ratio already "
            "divides by the engine's logprobs, and the TIS weight would correct for them twice)",
        )


@dataclass(frozen=True)
class JudgeConfig:
    """An LLM judge behind an OpenAI-compatible /chat/completions endpoint, docs/method.md §Rewards ([ours])."""

    base_url: str
    """Base URL of the endpoint, e.g. "http://127.0.0.1:8000/v1" ("/chat/completions" is appended)."""
    model: str
    """Model name sent in the request."""
    timeout_s: float = 30.0
    """Seconds to wait for the whole HTTP exchange before the call fails ([ours])."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key; None sends no Authorization header."""
    fallback_score: float | None = None
    """Score used when the judge fails; None (the default) makes a failure raise JudgeError ([ours])."""
    max_tokens: int = 16
    """Completion budget of the judge's reply, which is a single number ([ours])."""

    def __post_init__(self) -> None:
        _require(
            self.base_url.startswith(("http://", "https://")),
            f"judge.base_url must start with http:// or https://, got {self.base_url!r}",
        )
        _require(bool(self.model), "judge.model must not be empty")
        _require(self.timeout_s > 0, f"judge.timeout_s must be > 0, got {self.timeout_s!r}")
        _require(self.max_tokens >= 1, f"judge.max_tokens must be >= 1, got {self.max_tokens!r}")
        if self.fallback_score is not None:
            _require(
                0.0 <= self.fallback_score <= 1.0,
                f"judge.fallback_score must be in [0, 1] or None, got {self.fallback_score!r}",
            )


@dataclass(frozen=True)
class AlgoConfig:
    """All of the M-GRPO math's settings."""

    rewards: RewardConfig = field(default_factory=RewardConfig)
    """Reward weights (docs/method.md §Rewards)."""
    advantages: AdvantageConfig = field(default_factory=AdvantageConfig)
    """Advantage normalisation (docs/method.md §Group-relative advantages)."""
    alignment: AlignmentConfig = field(default_factory=AlignmentConfig)
    """Trajectory alignment (docs/method.md §Trajectory alignment)."""
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    """Clipped objective (docs/method.md §Objective)."""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> AlgoConfig:
        """Build from a plain mapping (e.g. parsed YAML); unknown sections or keys are a ValueError."""
        sections = {
            "rewards": RewardConfig,
            "advantages": AdvantageConfig,
            "alignment": AlignmentConfig,
            "objective": ObjectiveConfig,
        }
        unknown = set(raw) - set(sections)
        _require(not unknown, f"algo config: unknown section(s) {sorted(unknown)}; known: {sorted(sections)}")
        built = {}
        for name, section_cls in sections.items():
            values = raw.get(name) or {}
            known = {f.name for f in fields(section_cls)}
            bad = set(values) - known
            _require(not bad, f"algo config: unknown key(s) {sorted(bad)} in section {name!r}; known: {sorted(known)}")
            built[name] = section_cls(**values)
        return cls(**built)
