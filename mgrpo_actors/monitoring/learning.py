"""Did M get better over the run? Its correct rollouts in the run's first steps against its last ones, on the
questions met in both (a `pipeline.question_pool` asks the same questions every step), with an exact test
(docs/method.md §Training schedule, "Did M get better?").

The first and the last `window` steps are compared: ⌊steps / 3⌋ of them, at least one. Per question q met
in both windows: a_q correct of n_q rollouts in the first, b_q of m_q in the last. If the run learned nothing,
which window a rollout of q fell in says nothing about whether it was correct: given q's K_q = a_q + b_q
correct rollouts among its N_q = n_q + m_q, the number in the last window is hypergeometric
(N_q, K_q, m_q), independently per question. The statistic is B = Σ b_q; its null distribution is the
convolution of those hypergeometrics (the exact conditional test stratified by question; one question is
Fisher's exact test), computed in floats. `p_value` = P(B ≥ observed): how often rollouts of the same
questions would show a rise at least this large without any learning. Comparing within questions keeps a
question's difficulty out of it; rollouts within a window are taken as exchangeable, as a step's K
rollouts of a question are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import exp, lgamma
from typing import Any

import numpy as np

__all__ = ["LearningCheck", "learning_check", "stratified_rise_p_value"]


@dataclass(frozen=True)
class LearningCheck:
    """M's correct rollouts in the first and last steps of a run, on the questions met in both."""

    first_steps: tuple[int, int]  # first and last step number of the first window
    last_steps: tuple[int, int]
    questions: int  # questions met in both windows (only these are counted)
    first_correct: int
    first_rollouts: int
    last_correct: int
    last_rollouts: int
    p_value: float  # P(a rise at least this large | no learning), exact within questions

    @property
    def first_rate(self) -> float:
        return self.first_correct / self.first_rollouts

    @property
    def last_rate(self) -> float:
        return self.last_correct / self.last_rollouts

    def as_dict(self) -> dict[str, Any]:
        return {
            "first_steps": list(self.first_steps),
            "last_steps": list(self.last_steps),
            "questions": self.questions,
            "first_correct": self.first_correct,
            "first_rollouts": self.first_rollouts,
            "last_correct": self.last_correct,
            "last_rollouts": self.last_rollouts,
            "p_value": self.p_value,
        }

    def line(self) -> str:
        """One sentence for the run's summary."""
        (f0, f1), (l0, l1) = self.first_steps, self.last_steps
        steps = lambda a, b: f"step {a}" if a == b else f"steps {a}-{b}"  # noqa: E731
        change = self.last_rate - self.first_rate
        p = "p < 1e-300" if self.p_value == 0 else f"p = {self.p_value:.3g}"  # a p that underflowed to 0
        verdict = (
            f"{p} that it rises this much without learning (exact, within questions)"
            if self.last_correct * self.first_rollouts > self.first_correct * self.last_rollouts
            else "no rise"
        )
        return (
            f"M correct on the same {self.questions} question{'s' if self.questions > 1 else ''}: "
            f"{steps(f0, f1)} {self.first_correct}/{self.first_rollouts} ({self.first_rate:.3f}) -> "
            f"{steps(l0, l1)} {self.last_correct}/{self.last_rollouts} ({self.last_rate:.3f}), {change:+.3f}; "
            f"{verdict}"
        )


def _log_comb(n: int, k: int) -> float:
    return lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1)


def _hypergeometric(total: int, successes: int, draws: int) -> tuple[int, np.ndarray]:
    """(lowest x, P(X = x) from there on) of the successes among `draws` taken without replacement from `total`
    holding `successes`. In floats through log-binomials: exact fractions grow without bound over long runs."""
    low, high = max(0, draws - (total - successes)), min(draws, successes)
    ways = _log_comb(total, draws)
    pmf = np.array(
        [exp(_log_comb(successes, x) + _log_comb(total - successes, draws - x) - ways) for x in range(low, high + 1)]
    )
    return low, pmf / pmf.sum()


def stratified_rise_p_value(strata: Sequence[tuple[int, int, int, int]]) -> float:
    """P(Σ b_q ≥ observed) under no change, for strata (a_q, n_q, b_q, m_q): a_q correct of n_q before, b_q of
    m_q after: the convolution of the per-stratum hypergeometrics (docs/method.md §Training schedule, "Did M get
    better?"), in floats: rounding grows with the rollouts counted, about 1e-12 for thousands."""
    offset, distribution = 0, np.ones(1)
    observed = 0
    for a, n, b, m in strata:
        if not (0 <= a <= n and 0 <= b <= m and n + m > 0):
            raise ValueError(f"not counts of correct rollouts: {a}/{n} before, {b}/{m} after")
        low, stratum = _hypergeometric(n + m, a + b, m)
        offset, distribution = offset + low, np.convolve(distribution, stratum)
        observed += b
    return float(min(1.0, max(0.0, distribution[max(0, observed - offset) :].sum())))


def _counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """question -> (correct, rollouts) summed over `rows` (each row's `questions`: {id: [correct, rollouts]})."""
    counts: dict[str, tuple[int, int]] = {}
    for row in rows:
        for question, (correct, rollouts) in (row.get("questions") or {}).items():
            before = counts.get(question, (0, 0))
            counts[question] = (before[0] + int(correct), before[1] + int(rollouts))
    return counts


def learning_check(rows: Sequence[Mapping[str, Any]]) -> LearningCheck | None:
    """The first third of the steps (at least one) against the last third, on the questions met in both; None for
    fewer than 2 steps or no question met in both windows (then there is nothing like for like to compare)."""
    rows = [row for row in rows if row.get("questions")]
    if len(rows) < 2:
        return None
    window = max(1, len(rows) // 3)
    first, last = _counts(rows[:window]), _counts(rows[-window:])
    # A question counts when each window has rollouts of it (a row may list one it got no rollout of).
    common = sorted(q for q in set(first) & set(last) if first[q][1] > 0 and last[q][1] > 0)
    if not common:
        return None
    strata = [(*first[q], *last[q]) for q in common]
    return LearningCheck(
        first_steps=(rows[0]["step"], rows[window - 1]["step"]),
        last_steps=(rows[-window]["step"], rows[-1]["step"]),
        questions=len(common),
        first_correct=sum(a for a, _, _, _ in strata),
        first_rollouts=sum(n for _, n, _, _ in strata),
        last_correct=sum(b for _, _, b, _ in strata),
        last_rollouts=sum(m for _, _, _, m in strata),
        p_value=stratified_rise_p_value(strata),
    )
