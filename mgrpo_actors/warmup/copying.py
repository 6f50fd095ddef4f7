"""Copying practice for a model trained from scratch (warmup.copy_steps, warmup.copies): a run of token ids repeated,
learnt on the repeats.

An agent of the synthetic web copies all the time: the entity's name from the question into its delegation or search,
a url from the results into its visit, a fact from the page into its report, the findings into its answer. The names
are made-up words, new in every world, so a model can only copy them by reading its context: attention that finds the
earlier occurrence of the id it just wrote and takes the id after it (an induction head). Measured on tiny:web-main
after its 600-step warm-up without this practice (make compare, 2026-12-06): on 32 runs of 32 random ids written twice,
its loss on the repeat was 10.5 nats and it predicted none of the repeated ids (guessing: 8.3 nats); in one rollout M
delegated a question about another entity than the one asked.

How a sample is made, as measured on tiny:web-main's architecture trained from scratch on these samples alone (2-core
Xeon, 32 samples a step, lr 2e-3, over 4,000 ids): a run written twice at lengths 8-48 was still at 7.7 nats after 500
steps; written four times at lengths 4-16, 4.9 at step 900 and 4.6-5.3 through step 1,400; the same opened by a start
id (the id every episode opens with, presumably something heads can attend to when nothing earlier is worth reading)
fell to 3.4 by step 900 and 2.1 by 1,100 (docs/benchmarks.md). So: the start id, then a run of 4-16 ids written four
times, learnt from the second writing's second id on (nothing predicts the run's first writing nor the second writing's
first id). In make compare's warm-up it taught some copying and also repeating, and made the warm start worse
(docs/benchmarks.md): warmup.copy_steps and warmup.copies are 0 by default.

The ids are drawn from those the agent's own episodes use (embeddings of ids it never meets stay untrained). Each
sample is a function of (seed, index) alone, so the pool is as large as the draws need, the same on every machine,
and a warm-up resumed from its checkpoint draws the very same samples (checkpoint.py). `copied_share` measures what a
warm-up taught: the share of a held-out pool's learnt ids the model predicts, recorded in warmup.json per agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CopyRuns", "CopySample", "copied_share"]

SHORTEST_RUN = 4  # ids in a run
LONGEST_RUN = 16
WRITINGS = 4  # times the run is written


@dataclass(frozen=True)
class CopySample:
    """The start id, then a run of ids written WRITINGS times; the loss from the second writing's second id on."""

    token_ids: np.ndarray  # int [1 + WRITINGS * n]
    loss_mask: np.ndarray  # uint8, 1 on positions n + 2 onwards


class CopyRuns(Sequence[CopySample]):
    """An endless pool of copying samples over `ids` (the ids the episodes use), each opened by `start_id`, sample i
    fixed by (seed, i)."""

    def __init__(
        self, ids: np.ndarray, start_id: int, seed: int, held_out: bool = False, size: int = 2**31 - 1
    ) -> None:
        self._ids = np.unique(np.asarray(ids, dtype=np.int64))
        if len(self._ids) < 2:
            raise ValueError(f"copying practice needs at least 2 distinct ids to draw from, got {len(self._ids)}")
        self._start, self._seed, self._size = start_id, seed, size
        # held out: other samples than the practice's, for copied_share (numpy seeds [s, i] and [s, i, 0] alike, so the
        # held-out stream must not be 0)
        self._stream = (1,) if held_out else ()

    def held_out(self) -> CopyRuns:
        """The same ids and start id, other samples (for copied_share)."""
        return CopyRuns(self._ids, self._start, self._seed, held_out=True, size=self._size)

    def __len__(self) -> int:
        return self._size

    def __iter__(self):  # type: ignore[override]
        raise TypeError("CopyRuns is an endless pool (2**31 samples): index it or draw from it, never iterate it")

    def __getitem__(self, index: int) -> CopySample:  # type: ignore[override]
        if not 0 <= index < self._size:
            raise IndexError(index)
        rng = np.random.default_rng([self._seed, index, *self._stream])
        length = int(rng.integers(SHORTEST_RUN, LONGEST_RUN + 1))
        run = self._ids[rng.integers(0, len(self._ids), size=length)]
        token_ids = np.concatenate([[self._start], np.tile(run, WRITINGS)])
        mask = np.zeros(len(token_ids), dtype=np.uint8)
        mask[length + 2 :] = 1
        return CopySample(token_ids, mask)


def copied_share(model: torch.nn.Module, pool: CopyRuns, count: int = 64) -> float:
    """The share of the learnt ids (loss mask 1) of `pool`'s first `count` samples that `model` predicts as its most
    likely next id, one forward pass per sample in the weights' own dtype, in eval mode: about 0 for a model that does
    not copy (a run's ids are drawn at random), 1 for one that copies every id from the run's second writing's second
    on (the third and fourth writings included, each easier than the second)."""
    right = total = 0
    training = model.training
    model.eval()
    with torch.no_grad():
        for index in range(count):
            sample = pool[index]
            ids = torch.from_numpy(sample.token_ids)[None]
            predicted = model(input_ids=ids).logits[0, :-1].argmax(-1)
            learnt = torch.from_numpy(sample.loss_mask[1:].astype(bool))
            right += int((predicted[learnt] == ids[0, 1:][learnt]).sum())
            total += int(learnt.sum())
    model.train(training)
    return right / max(total, 1)
