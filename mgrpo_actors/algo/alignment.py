"""Trajectory alignment: every rollout gets exactly D sub-trajectory slots, docs/method.md §Trajectory alignment.

In one rollout M calls S a variable number of times d_k. To train S on fixed-size batches, each
rollout is brought to exactly D slots:
  d_k > D: drop d_k − D of its sub-trajectories, uniformly at random (without replacement);
  d_k < D: "duplicate" mode adds D − d_k copies of its own sub-trajectories, uniform with replacement;
           "mask" mode adds D − d_k placeholders instead;
  d_k = 0: nothing to duplicate, so D placeholders in either mode ([ours]).
Placeholders have loss weight 0 and no source; duplicates have weight 1 (they count in the group).
A batch of B queries with K rollouts each therefore always holds exactly B·K·D slots.

Call ids are unique only within a query (the rollout code names them "r{k}.t{i}"), so the plan keys
every sub-trajectory by (query index b, rollout index k, call id): the same call id may appear in
several queries or rollouts; only a repeat within one rollout is an error.

The random choices are vectorised over all B·K rollouts (no Python loop over slots) and come from the
numpy Generator the caller passes, so a seeded Generator reproduces the same batch.
"""

from __future__ import annotations

import enum
from collections import Counter, deque
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt
import torch

from mgrpo_actors.algo.config import AlignmentConfig, AlignmentMode

MaskT = TypeVar("MaskT", np.ndarray, torch.Tensor)


class SlotKind(enum.IntEnum):
    """What fills an aligned slot."""

    ORIGINAL = 0
    DUPLICATE = 1
    PLACEHOLDER = 2


# A sub-trajectory's batch-unique key: (query index b, rollout index k, call id).
SubKey = tuple[int, int, Hashable]


class Slot(NamedTuple):
    """One of the B·K·D aligned samples, for reading and logging."""

    query: int
    rollout: int
    index: int
    # Key (b, k, call id) of the sub-trajectory this slot trains on; None for a placeholder.
    source_id: SubKey | None
    # Call id of that sub-trajectory within its rollout (source_id[2]); None for a placeholder.
    call_id: Hashable | None
    kind: SlotKind
    # Loss weight: 1, or 0 for a placeholder (whose loss mask must be all 0).
    weight: float


@dataclass(frozen=True, eq=False)
class AlignmentPlan:
    """How the sub batch is laid out: arrays shaped (B, K, D) plus what was dropped (not the batch itself;
    the wire message that carries a built batch is `protocols.AlignedBatch`).

    `ids` holds the key (b, k, call id) of every input sub-trajectory, in query, rollout, call order;
    `source[b, k, j]` indexes `ids`, -1 for a placeholder. Every source of rollout (b, k) is one of that
    rollout's own keys. A batch builder lays the B·K·D samples out in `slots()` order and multiplies each
    sample's loss mask by `loss_weights()` (`mask_placeholders` does it), so placeholders, whatever
    tokens fill them, carry an all-zero loss mask (docs/method.md §Objective).
    """

    d: int
    mode: AlignmentMode
    ids: tuple[SubKey, ...]
    source: np.ndarray
    kind: np.ndarray
    weight: np.ndarray
    # d_k as observed before alignment, shaped (B, K).
    observed: np.ndarray
    # Per query, per rollout: the keys (b, k, call id) dropped because d_k > D.
    dropped: tuple[tuple[tuple[SubKey, ...], ...], ...]

    @property
    def num_queries(self) -> int:
        return self.source.shape[0]

    @property
    def k(self) -> int:
        return self.source.shape[1]

    @property
    def num_samples(self) -> int:
        return self.source.size

    def count(self, kind: SlotKind) -> np.ndarray:
        """How many slots of this kind each rollout holds, shaped (B, K)."""
        return (self.kind == kind).sum(axis=2)

    def num_dropped(self) -> np.ndarray:
        """How many sub-trajectories each rollout dropped, shaped (B, K)."""
        return np.maximum(self.observed - self.d, 0)

    def summary(self) -> dict[str, int]:
        """Totals for metrics and logs."""
        return {
            "samples": self.num_samples,
            "original": int(self.count(SlotKind.ORIGINAL).sum()),
            "duplicate": int(self.count(SlotKind.DUPLICATE).sum()),
            "placeholder": int(self.count(SlotKind.PLACEHOLDER).sum()),
            "dropped": int(self.num_dropped().sum()),
        }

    def slots(self) -> Iterator[Slot]:
        """Every slot in (query, rollout, index) order."""
        for (b, k, j), source in np.ndenumerate(self.source):
            key = None if source < 0 else self.ids[source]
            yield Slot(
                query=b,
                rollout=k,
                index=j,
                source_id=key,
                call_id=None if key is None else key[2],
                kind=SlotKind(int(self.kind[b, k, j])),
                weight=float(self.weight[b, k, j]),
            )

    def loss_weights(self) -> np.ndarray:
        """Per slot, flat (B·K·D,) in `slots()` order: 1, or 0 for a placeholder.

        docs/method.md §Trajectory alignment / §Objective: placeholders have loss weight 0, i.e. an all-zero
        loss mask; multiply each slot's loss mask by its entry (or call `mask_placeholders`).
        """
        return self.weight.reshape(-1)

    def mask_placeholders(self, loss_mask: MaskT) -> MaskT:
        """Slot loss masks (B·K·D, T) in `slots()` order (numpy or torch) with placeholder rows set to 0."""
        if loss_mask.ndim != 2 or loss_mask.shape[0] != self.num_samples:
            raise ValueError(f"loss_mask must be shaped ({self.num_samples}, T), got {tuple(loss_mask.shape)}")
        weights = self.loss_weights()
        if isinstance(loss_mask, torch.Tensor):
            return loss_mask * torch.as_tensor(weights, device=loss_mask.device).to(loss_mask.dtype)[:, None]
        return loss_mask * weights.astype(loss_mask.dtype)[:, None]

    def gather(self, values: Mapping[SubKey, float] | npt.ArrayLike, fill: float = 0.0) -> np.ndarray:
        """Per-sub-trajectory values (by key (b, k, call id), or an array in `ids` order) laid out as (B, K, D).

        Placeholders get `fill`. Used to place R_S (or any per-sub-trajectory scalar) on the slots.
        """
        if isinstance(values, Mapping):
            missing = [i for i in self.ids if i not in values]
            if missing:
                keys = f"{missing[:5]} ({len(missing)} missing)"
                raise ValueError(f"no value for sub-trajectory key(s) (query, rollout, call id) {keys}")
            flat = np.array([values[i] for i in self.ids], dtype=np.float64)
        else:
            flat = np.asarray(values, dtype=np.float64)
            if flat.shape != (len(self.ids),):
                raise ValueError(f"values shape {flat.shape} does not match the {len(self.ids)} input ids")
        padded = np.append(flat, fill)  # index -1 (placeholder) reads the fill value
        return padded[self.source]


def _validate(sub_ids: Sequence[Sequence[Sequence[Hashable]]]) -> int:
    """Check the nesting (B queries × K rollouts × d_k ids) and unique call ids per rollout; return K."""
    if len(sub_ids) == 0:
        raise ValueError("alignment: empty batch (no queries)")
    k = len(sub_ids[0])
    if k == 0:
        raise ValueError("alignment: query 0 has no rollouts (K = 0)")
    for b, rollouts in enumerate(sub_ids):
        if len(rollouts) != k:
            raise ValueError(f"alignment: query {b} has {len(rollouts)} rollouts, query 0 has {k}; K must be the same")
        for r, calls in enumerate(rollouts):
            repeated = [i for i, n in Counter(calls).items() if n > 1]
            if repeated:
                raise ValueError(
                    f"alignment: call ids must be unique within a rollout; query {b} rollout {r} repeats {repeated[:5]}"
                )
    return k


def align(
    sub_ids: Sequence[Sequence[Sequence[Hashable]]], d: int, rng: np.random.Generator, mode: AlignmentMode = "duplicate"
) -> AlignmentPlan:
    """Align each rollout's sub-trajectories to exactly `d` slots (docs/method.md §Trajectory alignment).

    `sub_ids[b][k]` lists the call ids of the sub-trajectories of rollout k of query b, in call order.
    Call ids must be unique within a rollout; the plan keys each as (b, k, call id). Returns exactly
    B·K·d slots.
    """
    if not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"alignment: D must be an integer >= 1, got {d!r}")
    if mode not in ("duplicate", "mask"):
        raise ValueError(f"alignment: mode must be 'duplicate' or 'mask', got {mode!r}")
    k = _validate(sub_ids)
    batch = len(sub_ids)
    rollouts = [[(b, r, call) for call in calls] for b, query in enumerate(sub_ids) for r, calls in enumerate(query)]
    ids = tuple(key for keys in rollouts for key in keys)

    observed = np.array([len(keys) for keys in rollouts], dtype=np.int64)  # d_k per rollout, (R,)
    offset = np.concatenate([[0], np.cumsum(observed)[:-1]])  # first flat index of each rollout
    width = max(int(observed.max()), d)
    column = np.arange(width)[None, :]

    # Keep a uniform random subset of min(d_k, D) calls: random sort keys, invalid positions last,
    # the D smallest win; sorting the winners keeps call order.
    sort_keys = np.where(column < observed[:, None], rng.random((len(rollouts), width)), np.inf)
    order = np.argsort(sort_keys, axis=1, kind="stable")
    kept = np.sort(order[:, :d], axis=1)
    slot = np.arange(d)[None, :]
    is_original = slot < observed[:, None]

    # Fill the remaining D − d_k slots: own calls drawn uniformly with replacement, or placeholders.
    draws = np.floor(rng.random((len(rollouts), d)) * np.maximum(observed, 1)[:, None]).astype(np.int64)
    can_duplicate = (observed[:, None] > 0) & (mode == "duplicate")
    is_duplicate = ~is_original & can_duplicate
    position = np.where(is_original, kept, draws)
    source = np.where(is_original | is_duplicate, offset[:, None] + position, -1)
    kind = np.select([is_original, is_duplicate], [SlotKind.ORIGINAL, SlotKind.DUPLICATE], SlotKind.PLACEHOLDER)

    dropped_positions = [np.sort(order[r, d:n]) if n > d else () for r, n in enumerate(observed.tolist())]
    dropped_flat = [tuple(rollouts[r][p] for p in positions) for r, positions in enumerate(dropped_positions)]
    dropped = tuple(tuple(dropped_flat[b * k : (b + 1) * k]) for b in range(batch))

    shape = (batch, k, d)
    return AlignmentPlan(
        d=int(d),
        mode=mode,
        ids=ids,
        source=source.reshape(shape),
        kind=kind.astype(np.int8).reshape(shape),
        weight=(kind != SlotKind.PLACEHOLDER).astype(np.float32).reshape(shape),
        observed=observed.reshape(batch, k),
        dropped=dropped,
    )


class DEstimator:
    """The D used for alignment: fixed, or `D: auto` from the observed d_k (docs/method.md §Trajectory alignment).

    `D: auto` picks the smallest D with P(d_k <= D) >= quantile over the last `window` observations,
    clamped to [d_min, d_max]. D only changes at `end_step()`, never mid-step ([ours]): observations
    made during a step take effect for the next one.
    """

    def __init__(self, cfg: AlignmentConfig) -> None:
        self.cfg = cfg
        self.auto = cfg.d == "auto"
        self._window: deque[int] = deque(maxlen=cfg.window)
        self._d = cfg.d_initial if self.auto else int(cfg.d)

    @property
    def d(self) -> int:
        """The D to align to during the current step."""
        return self._d

    def observe(self, counts: Iterable[int]) -> None:
        """Record observed d_k values (sub calls per rollout)."""
        values = [int(c) for c in counts]
        if any(c < 0 for c in values):
            raise ValueError(f"d_k counts must be >= 0, got {values}")
        self._window.extend(values)

    def end_step(self) -> int:
        """Close the step: under D: auto re-estimate D from the window; return the D for the next step."""
        if self.auto and self._window:
            quantile = np.quantile(np.fromiter(self._window, dtype=np.int64), self.cfg.quantile, method="inverted_cdf")
            self._d = int(np.clip(quantile, self.cfg.d_min, self.cfg.d_max))
        return self._d

    def state(self) -> dict[str, Any]:
        """The D in use and the window, to persist (a restarted aligner resumes with them)."""
        return {"d": self._d, "window": list(self._window)}

    def restore(self, state: dict[str, Any]) -> None:
        """Resume from `state()`; a fixed D stays the configured one."""
        self._window.clear()
        self._window.extend(int(c) for c in state.get("window", []))
        if self.auto:
            self._d = int(np.clip(int(state.get("d", self._d)), self.cfg.d_min, self.cfg.d_max))

    def coverage(self) -> float | None:
        """Fraction of windowed d_k <= current D (the paper aims for ≈ 0.99); None before any observation."""
        if not self._window:
            return None
        return float(np.mean(np.fromiter(self._window, dtype=np.int64) <= self._d))
