"""A figure over a few independent training runs (seeds): its mean and a 95 % Student-t interval,
mean ± t(0.975, n - 1) · sd / sqrt(n) (sample sd). Seeds are few (3 to 10), where the normal's 1.96 would
understate the interval badly (t(0.975, 2) = 4.303), hence the t quantile, from the standard table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["OverSeeds", "over_seeds", "t_975"]

# t(0.975, df) for df = 1 … 30 (any statistics table); beyond 30 the normal's 1.960, up to 4 % narrower than t
# there (t(0.975, 31) = 2.040): a comparison of 32 seeds or more is not one this machine runs
_T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_975(df: int) -> float:
    """The 97.5 % quantile of Student's t with `df` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"t needs df >= 1, got {df}")
    return _T_975[df - 1] if df <= len(_T_975) else 1.960


@dataclass(frozen=True)
class OverSeeds:
    """One figure's values over the seeds."""

    values: list[float]  # per seed, in seed order
    mean: float
    ci_low: float | None  # 95 % t-interval of the mean; None with one seed (no spread to go by)
    ci_high: float | None


def over_seeds(values: Sequence[float]) -> OverSeeds:
    """The mean and 95 % t-interval of `values` (one per seed)."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0 or not np.all(np.isfinite(array)):
        raise ValueError(f"need one finite value per seed, got {list(values)}")
    mean = float(array.mean())
    if array.size == 1:
        return OverSeeds([float(v) for v in array], mean, None, None)
    half = t_975(array.size - 1) * float(array.std(ddof=1)) / float(np.sqrt(array.size))
    return OverSeeds([float(v) for v in array], mean, mean - half, mean + half)
