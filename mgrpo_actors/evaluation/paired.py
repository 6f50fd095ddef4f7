"""`mgrpo eval --compare A B`: the paired difference of two evaluation reports on the same questions.

Two methods evaluated on the same questions differ by much less noise when compared question by question than
when their means are compared: a hard question is hard for both. Per question the unit is its accuracy in a
report (the mean of `correct` over that report's sampled runs), so reports with different `--runs` still pair.
Over the n questions both reports hold, with d_i = a_i - b_i:

- the mean difference and its standard error sd(d) / sqrt(n) (sample sd, n - 1; so n >= 2);
- a 95 % interval: the percentile bootstrap over questions (resampling the n pairs with replacement
  BOOTSTRAP_RESAMPLES times, seeded, so the same reports always give the same interval);
- a two-sided p-value of "no difference" by the paired sign-flip permutation test: under the null each d_i
  is as likely -d_i, so p = P(|mean of ±d_i| >= |mean d|), exact over all 2^m sign patterns of the m non-zero
  differences when m <= EXACT_UP_TO, else from PERMUTATIONS seeded random patterns (counting the observed one,
  so p is never 0);
- how many questions A got more of, fewer of, or as many as B.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "EXACT_UP_TO",
    "PERMUTATIONS",
    "PairedDifference",
    "paired_by_id",
    "paired_difference",
    "paired_from_reports",
    "question_accuracy",
]

# resamples of the percentile bootstrap ([ours]; with few questions the resampled means take few values, and an end
# can sit one such step (1/(runs·n)) from where more resamples would put it)
BOOTSTRAP_RESAMPLES = 10_000
_CHUNK = 500  # resamples (and sign patterns) drawn at a time: 5,000 questions stay at ~20 MB
PERMUTATIONS = 20_000  # random sign patterns beyond EXACT_UP_TO non-zero differences
EXACT_UP_TO = 16  # enumerate all 2^m sign patterns up to this many non-zero differences (65,536 patterns)
_SEED = 0  # the bootstrap's and the permutations' seed: a comparison is reproducible


@dataclass(frozen=True)
class PairedDifference:
    """A - B over the questions both reports hold."""

    questions: int  # n: questions in both reports
    mean_a: float  # A's accuracy over those questions
    mean_b: float  # B's
    difference: float  # mean of d_i = a_i - b_i (= mean_a - mean_b)
    std_error: float  # sd(d) / sqrt(n), sample sd (n >= 2)
    ci_low: float  # 95 % percentile-bootstrap interval of the mean difference
    ci_high: float
    p_value: float  # two-sided, paired sign-flip permutation test of "no difference"
    exact: bool  # p_value from every sign pattern (else from PERMUTATIONS random ones)
    a_better: int  # questions where a_i > b_i
    b_better: int  # questions where a_i < b_i
    ties: int  # questions where a_i == b_i


def _sign_flip_p(d: np.ndarray, rng: np.random.Generator) -> tuple[float, bool]:
    nonzero = d[d != 0]
    observed = abs(d.sum())
    if observed == 0:
        return 1.0, True
    tol = 1e-12 * max(1.0, observed)  # sums of the same values in another order may differ in the last bits
    if nonzero.size <= EXACT_UP_TO:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=nonzero.size)))
        sums = np.abs(signs @ nonzero)
        return float(np.mean(sums >= observed - tol)), True
    extreme = 0
    for start in range(0, PERMUTATIONS, _CHUNK):
        signs = rng.choice((1.0, -1.0), size=(min(_CHUNK, PERMUTATIONS - start), nonzero.size))
        extreme += int(np.sum(np.abs(signs @ nonzero) >= observed - tol))
    return (extreme + 1) / (PERMUTATIONS + 1), False


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """The paired statistics of per-question accuracies `a` and `b` (the same questions, in the same order)."""
    a_arr, b_arr = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a_arr.shape != b_arr.shape or a_arr.ndim != 1 or a_arr.size < 2:
        raise ValueError(
            "need two equally long lists of per-question values, at least 2 (a standard error needs them), "
            f"got {a_arr.shape} {b_arr.shape}"
        )
    d = a_arr - b_arr
    if not np.all(np.isfinite(d)):
        raise ValueError("per-question values must be finite numbers (a NaN would make every test pass)")
    n = d.size
    rng = np.random.default_rng(_SEED)
    means = np.concatenate(
        [
            d[rng.integers(0, n, size=(min(_CHUNK, BOOTSTRAP_RESAMPLES - start), n))].mean(axis=1)
            for start in range(0, BOOTSTRAP_RESAMPLES, _CHUNK)
        ]
    )
    low, high = np.percentile(means, [2.5, 97.5])
    p_value, exact = _sign_flip_p(d, rng)
    return PairedDifference(
        questions=n,
        mean_a=float(a_arr.mean()),
        mean_b=float(b_arr.mean()),
        difference=float(d.mean()),
        std_error=float(d.std(ddof=1) / np.sqrt(n)),
        ci_low=float(low),
        ci_high=float(high),
        p_value=p_value,
        exact=exact,
        a_better=int(np.sum(d > 0)),
        b_better=int(np.sum(d < 0)),
        ties=int(np.sum(d == 0)),
    )


def question_accuracy(report: Mapping[str, Any]) -> dict[str, float]:
    """Question id -> its accuracy (mean `correct` over the runs) in an `mgrpo eval` report."""
    rows = report.get("questions")
    if not isinstance(rows, list) or not rows:
        raise ValueError("not an `mgrpo eval` report: no per-question rows (questions)")
    accuracy = {}
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row.get("correct"):
            raise ValueError(f"not an `mgrpo eval` report: a question row without id or correct ({str(row)[:80]})")
        if row["id"] in accuracy:
            raise ValueError(f"question id {row['id']!r} appears twice in one report: ids must be unique to pair")
        accuracy[row["id"]] = float(np.mean(row["correct"]))
    return accuracy


def paired_by_id(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[PairedDifference, list[str]]:
    """The paired difference A - B of per-question values by question id, over the ids both hold, and those ids
    in A's order; ValueError when they share none (or only one)."""
    shared = [qid for qid in a if qid in b]
    if not shared:
        raise ValueError("the two reports share no question id: nothing to pair")
    return paired_difference([a[q] for q in shared], [b[q] for q in shared]), shared


def paired_from_reports(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[PairedDifference, list[str], int, int]:
    """(the paired difference A - B over the questions both hold, their ids in A's order, questions only in A,
    questions only in B); ValueError when they share none."""
    acc_a, acc_b = question_accuracy(a), question_accuracy(b)
    paired, shared = paired_by_id(acc_a, acc_b)
    return paired, shared, len(acc_a) - len(shared), len(acc_b) - len(shared)
