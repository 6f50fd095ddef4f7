"""The rollout engine's decoding loop: one forward over each row's new prompt tokens, then one token per
row per step, on a RowCache (kv_cache.py) that the next call starts from.

Sampling is exactly the distribution the learner scores (sampler.py: temperature, top-k, top-p by
transformers' rules, nucleus.py; the behaviour logprob of a token is log-softmax of the warped scores at
that token, and the token is drawn by inverse transform from those same probabilities). Each row draws
from a stream of its own, seeded by the call's seed and the row's index: what row i samples depends on its own
prompt and seed, not on which other rows share the batch (up to the rounding of batched matrix
products). Only the last position's logits are computed (`logits_to_keep=1`): no vocabulary-wide work
on prompt tokens. Rows leave the batch as they finish (NARROW_AT): once few still sample, those go on in a
smaller batch of their own, and the cache handed back holds every row as if none had left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mgrpo_actors.engines import attention
from mgrpo_actors.engines.base import FinishReason, SamplingParams, StopCheck, asks_stop_check
from mgrpo_actors.engines.kv_cache import RowCache, gathered
from mgrpo_actors.engines.sampler import sample

__all__ = ["Decoded", "block_of", "decode", "feeder", "forward_block", "row_generators"]


@dataclass(frozen=True)
class Decoded:
    """One row's sampled ids (the stop id included) with their behaviour logprobs."""

    token_ids: list[int]
    logprobs: np.ndarray  # float32
    finish_reason: FinishReason


def row_generators(rows: int, seed: int | None, engine_rng: torch.Generator) -> list[torch.Generator]:
    """One sampling stream per row: from (seed, row) when the call is seeded, else drawn from the engine's
    own stream (which then moves on)."""
    generators = []
    for row in range(rows):
        if seed is None:
            row_seed = int(torch.randint(0, 2**62, (1,), generator=engine_rng).item())
        else:
            row_seed = int(np.random.SeedSequence([seed, row]).generate_state(2, dtype=np.uint64)[0] >> 2)
        generators.append(torch.Generator().manual_seed(row_seed))
    return generators


def block_of(suffixes: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, valid) [rows, width]: each row's new ids right-aligned, so every row's last id is in the last
    column (a row with none is all holes)."""
    width = max(len(s) for s in suffixes)
    block = torch.full((len(suffixes), width), pad_id, dtype=torch.long)
    valid = torch.zeros(len(suffixes), width, dtype=torch.bool)
    for row, ids in enumerate(suffixes):
        if ids:
            block[row, width - len(ids) :] = torch.as_tensor(list(ids), dtype=torch.long)
            valid[row, width - len(ids) :] = True
    return block.to(device), valid.to(device)


def forward_block(model: torch.nn.Module, cache: RowCache, block: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Last-position logits [rows, vocab] of a block of new columns; the cache then holds them. A prefix the cache
    holds once for its rows goes to the attention as `shared_prefix` (attention.py; the engine's model runs it)."""
    prefix = cache.prefix_view()
    if prefix is not None and model.config._attn_implementation != attention.NAME:
        raise ValueError(f"a cache with a shared prefix needs the engine's attention ({attention.NAME})")
    out = model(
        input_ids=block,
        attention_mask=cache.mask(valid),
        position_ids=cache.positions(valid),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
        **({"shared_prefix": prefix} if prefix is not None else {}),
    )
    cache.advance(block, valid)
    return out.logits[:, -1]


def feeder(model: torch.nn.Module, pad_id: int):  # -> prefill.Feed
    """Feed suffixes into a cache without sampling (prefill.py's shared prefixes)."""

    def feed(cache: RowCache, suffixes: Sequence[Sequence[int]]) -> None:
        forward_block(model, cache, *block_of(suffixes, pad_id, cache.valid.device))

    return feed


# Rows leave the batch as they finish: once at most this share of the batch's rows still samples, the rest go on in
# a batch of their own (their cache rows copied out, without holes), so a step costs the rows still sampling. The
# copy of the cache rows is worth it only with enough steps left to save.
NARROW_AT = 0.5
NARROW_MIN_ROWS = 4  # rows that must have finished before a batch is narrowed
NARROW_MIN_STEPS_LEFT = 8  # steps the budget must still allow


@dataclass
class _Batch:
    """The rows decoding together: their cache, which of the call's rows they are, and their sampling streams."""

    cache: RowCache
    rows: list[int]  # the call's row of each cache row
    generators: list[torch.Generator]


def _narrowed(batch: _Batch, alive: torch.Tensor, extra: int) -> _Batch:
    """The batch of `batch`'s rows still sampling (`alive`), their cache rows copied without holes, with room for
    `extra` more columns; the finished rows stay where they are."""
    keep = [i for i, on in enumerate(alive.tolist()) if on]
    cache = batch.cache.select(keep, [len(batch.cache.tokens[i]) for i in keep], extra)
    return _Batch(cache, [batch.rows[i] for i in keep], [batch.generators[i] for i in keep])


def _worth_narrowing(rows: int, still: int, steps_left: int) -> bool:
    """Whether a batch of `rows` rows, `still` of them sampling, should go on narrowed (NARROW_AT and the minimums
    that pay for the copy of the cache rows)."""
    return steps_left >= NARROW_MIN_STEPS_LEFT and still <= NARROW_AT * rows and rows - still >= NARROW_MIN_ROWS


def decode(
    model: torch.nn.Module,
    cache: RowCache,
    suffixes: Sequence[Sequence[int]],
    params: SamplingParams,
    stop_ids: set[int],
    generators: Sequence[torch.Generator],
    pad_id: int,
    narrow: bool = True,
) -> tuple[list[Decoded], RowCache]:
    """Feed each row's new prompt tokens `suffixes[i]` (at least one each), then sample up to
    `params.max_new_tokens` tokens per row until each has sampled a stop id. Returns the rows and the cache that holds
    them all (its row i: row i's ids). With `narrow`, rows leave the batch as they finish (NARROW_AT): a row samples
    what it would in the whole batch, from its own stream, up to the rounding of batched matrix products."""
    rows, device = len(suffixes), cache.valid.device
    block, block_valid = block_of(suffixes, pad_id, device)
    cache.reserve(block.shape[1] + params.max_new_tokens)
    stop = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    batch = _Batch(cache, list(range(rows)), list(generators))
    home = [(cache, row) for row in range(rows)]  # the cache row that holds each row's keys and values
    steps: list[tuple[list[int], torch.Tensor, torch.Tensor]] = []  # (the batch's rows, ids, logprobs) per step
    alive = torch.ones(rows, dtype=torch.bool, device=device)
    checked = _Checked(rows, params.stop_check) if params.stop_check is not None else None
    logits = forward_block(model, cache, block, block_valid)
    for step in range(params.max_new_tokens):
        ids, lps = sample(logits, params, batch.generators)
        steps.append((batch.rows, ids, lps))
        was_alive, alive = alive, alive & ~torch.isin(ids, stop)
        if checked is not None:
            alive = checked.after(batch.rows, ids, was_alive, alive)
        steps_left, still = params.max_new_tokens - 1 - step, int(alive.sum())
        if steps_left == 0 or still == 0:
            break
        if narrow and _worth_narrowing(len(batch.rows), still, steps_left):
            batch = _narrowed(batch, alive, steps_left)
            for i, row in enumerate(batch.rows):
                home[row] = (batch.cache, i)
            ids, alive = ids[alive], alive[alive]
        logits = forward_block(model, batch.cache, torch.where(alive, ids, pad_id)[:, None], alive[:, None])
    decoded = _rows(rows, steps, stop_ids, checked.ends if checked is not None else {})
    if batch.cache is cache:
        return decoded, cache
    picks = [(held, i, len(held.tokens[i])) for held, i in home]
    return decoded, gathered(cache.shape, picks, extra=0)


class _Checked:
    """A call's stop_check (SamplingParams): each row's ids so far, and where the check ended the rows it ended."""

    def __init__(self, rows: int, check: StopCheck) -> None:
        self.check = check
        self.sampled: list[list[int]] = [[] for _ in range(rows)]
        self.last_candidate = [0] * rows  # per row: its length after its last candidate id (0: none yet)
        self.ends: dict[int, int] = {}  # the call's row -> its length when the check ended it

    def after(self, rows: list[int], ids: torch.Tensor, was_alive: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        """`alive` with the rows the check ends now set False; the batch's rows `rows` sampled `ids`."""
        ended = []
        for j, (row, token, was, still) in enumerate(zip(rows, ids.tolist(), was_alive.tolist(), alive.tolist())):
            if not was:
                continue
            sampled = self.sampled[row]
            sampled.append(token)
            since = len(sampled) - self.last_candidate[row] if self.last_candidate[row] else 0
            if token in self.check.candidates:
                self.last_candidate[row] = len(sampled)
            if still and asks_stop_check(self.check, token, since) and self.check(sampled):
                self.ends[row] = len(sampled)
                ended.append(j)
        if not ended:
            return alive
        alive = alive.clone()
        alive[ended] = False
        return alive


def _rows(
    rows: int, steps: Sequence[tuple[list[int], torch.Tensor, torch.Tensor]], stop_ids: set[int], ends: dict[int, int]
) -> list[Decoded]:
    """Each row's ids up to its first stop id or where its stop check ended it (included; what a finished row drew
    after it is dropped) and their logprobs."""
    sampled: list[list[int]] = [[] for _ in range(rows)]
    logprobs: list[list[float]] = [[] for _ in range(rows)]
    members = [row for step_rows, _, _ in steps for row in step_rows]
    all_ids = torch.cat([ids for _, ids, _ in steps]).tolist()  # one copy to the host for the whole call
    all_lps = torch.cat([lps.float() for _, _, lps in steps]).tolist()
    for row, token, logprob in zip(members, all_ids, all_lps, strict=True):
        sampled[row].append(token)
        logprobs[row].append(logprob)
    out = []
    for row, (ids, lps) in enumerate(zip(sampled, logprobs, strict=True)):
        n = ends.get(row) or next((i + 1 for i, token in enumerate(ids) if token in stop_ids), len(ids))
        reason: FinishReason = "stop" if row in ends or ids[n - 1] in stop_ids else "length"
        row_lp = np.asarray(lps[:n], dtype=np.float32)
        if not np.isfinite(row_lp).all():
            raise RuntimeError("a sampled token has logprob -inf: sampling and logprobs used different distributions")
        out.append(Decoded(ids[:n], row_lp, reason))
    return out
