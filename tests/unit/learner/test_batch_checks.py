"""A learner's checks of a batch (learner/batch_checks.py): a batch its aligner built passes (main, sub aligned,
the FIFO ablation's chunks); a forged one is refused with the reason: the wrong size, an advantage of 1e6,
advantages that do not follow from the rewards, a placeholder with an advantage, NaN, a stranger's run or side."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mgrpo_actors.algo.advantages import group_advantages
from mgrpo_actors.algo.config import AdvantageConfig, AlignmentConfig
from mgrpo_actors.alignment.batch_rows import BatchRow, batch_to_rows, placeholder_row, rows_to_batch
from mgrpo_actors.learner.batch_checks import BatchCheck, check_batch

ADV = AdvantageConfig()
B, K, D = 2, 2, 2


def _row(i: int, group: int, reward: float, advantage: float) -> BatchRow:
    ids = np.array([5, 6, 7], np.int32)
    mask = np.array([0, 1, 1], np.uint8)
    logprobs = np.array([0.0, -0.5, -1.0], np.float32)
    return BatchRow(f"q{group}/a/r{i}", "original", ids, mask, logprobs, advantage, 1.0, reward, 0, group=group)


def _grouped(rewards: list[list[float]], side: str = "main", d: int = 0):
    """A batch of one group per list of rewards, advantages by the group normalisation (what an aligner sends)."""
    rows = []
    for g, values in enumerate(rewards):
        adv = group_advantages(np.array([values]), np.ones((1, len(values)), dtype=bool), ADV)[0]
        rows += [_row(len(rows) + i, g, r, float(a)) for i, (r, a) in enumerate(zip(values, adv))]
    return rows_to_batch("run", side, 0, "b", rows, d=d)


def _check(batch, side: str = "main", alignment: AlignmentConfig | None = None) -> None:
    check_batch(batch, "run", side, B * K, alignment or AlignmentConfig(d=D), ADV, queries=B, newest_version=0)


def test_batches_as_the_aligners_build_them_pass():
    _check(_grouped([[1.0, 0.0], [0.9, 0.1]]))  # main: B·K
    sub = _grouped([[1.0, 0.0, 0.5, 0.5], [0.2, 0.2, 0.2, 0.2]], "sub", d=D)  # sub: B·K·D; group 1 has no signal
    _check(sub, "sub")
    # a failed rollout: a placeholder, in no group, the group normalised over the other three
    three = _grouped([[1.0, 0.0, 0.5]])
    with_placeholder = rows_to_batch(
        "run", "main", 0, "b", [*batch_to_rows(three), placeholder_row("q/-/r9", "failed")]
    )
    _check(with_placeholder)


@pytest.mark.parametrize(
    ("forge", "reason"),
    [
        (lambda b: dataclasses.replace(b, advantages=np.array([1e6, -1.0, 1.0, -1.0], np.float32)), "beyond"),
        (lambda b: dataclasses.replace(b, advantages=np.array([-1.0, 1.0, 1.0, -1.0], np.float32)), "do not follow"),
        (lambda b: dataclasses.replace(b, rewards=np.array([0.5, 0.5, 0.9, 0.1], np.float32)), "every reward is the"),
        (lambda b: dataclasses.replace(b, advantages=np.array([np.nan, -1, 1, -1], np.float32)), "NaN or inf"),
        (lambda b: dataclasses.replace(b, weights=np.array([1, 1, 1, 0.5], np.float32)), "weights other than"),
        (lambda b: dataclasses.replace(b, weights=np.array([1, 1, 1, 0], np.float32)), "placeholder"),
        (lambda b: dataclasses.replace(b, groups=np.array([0, 0, -1, 1], np.int32)), "without an advantage group"),
        (lambda b: dataclasses.replace(b, run_id="other"), "of run 'other'"),
        (lambda b: dataclasses.replace(b, side="sub"), "side 'sub'"),
        (lambda b: dataclasses.replace(b, sample_ids=["a", "a", "b", "c"]), "repeat"),
        (lambda b: dataclasses.replace(b, lengths=np.array([3, 3, 3, 2], np.int32)), "token arrays"),
        (lambda b: dataclasses.replace(b, top_ks=np.zeros(3, np.int32)), "top_ks holds 3"),
        (lambda b: dataclasses.replace(b, groups=np.array([0, 0, 1, 2], np.int32)), "group 2 where the step has B = 2"),
        (lambda b: dataclasses.replace(b, policy_versions=np.array([0, 0, 1, 0], np.int32)), "newest announced is 0"),
    ],
)
def test_a_forged_batch_is_refused_with_its_reason(forge, reason):
    batch = _grouped([[1.0, 0.0], [0.9, 0.1]])
    _check(batch)
    with pytest.raises(BatchCheck, match=reason):
        _check(forge(batch))


def test_a_batch_of_the_wrong_size_is_refused():
    four_of_main = _grouped([[1.0, 0.0], [0.9, 0.1]])
    with pytest.raises(BatchCheck, match=r"3 samples where the step requires B·K = 4"):
        _check(_grouped([[1.0, 0.0, 0.5]]))
    with pytest.raises(BatchCheck, match=r"D = 0 is not this run's"):
        _check(dataclasses.replace(four_of_main, side="sub"), "sub")
    with pytest.raises(BatchCheck, match=r"4 samples where the step requires B·K·D = 8"):
        _check(dataclasses.replace(four_of_main, side="sub", d=D), "sub")
    auto = AlignmentConfig(d="auto", d_min=1, d_max=4, d_initial=2)
    _check(dataclasses.replace(four_of_main, side="sub", d=1), "sub", auto)  # D: auto within [d_min, d_max]
    with pytest.raises(BatchCheck, match="D = 5"):
        _check(dataclasses.replace(four_of_main, side="sub", d=5), "sub", auto)
