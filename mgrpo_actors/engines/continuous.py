"""`ContinuousBatch`: the hf engine's rows joining and leaving a running batch one decode step at a time
(continuous batching), for callers whose requests do not all arrive together: an episode whose turn ended
early runs its tool call and its next turn joins the batch while the other rows still decode
(rollout/driver.py `_run_continuously`).

A row is one prompt's continuation. `submit` queues it; each `step` admits what waits (ADMIT_SHARE), samples one
token for every running row and hands back the rows that finished (a stop id, or their budget spent) as
Generations. What a row samples depends on its prompt and its seed only, as in `HFEngine.generate`: its sampling
stream is the one `generate([prompt], params)` would give it alone (decode.row_generators with row 0), and its
keys and values are computed as alone (holes and positions as kv_cache.py), so a row that joins a running batch
samples what it would alone, up to the rounding of batched matrix products (tested in fp32).

Rows that finished leave their keys and values behind (the prompt and all but the last sampled id, as
`HFEngine.generate`'s cache): a later prompt that extends one (the episode's next turn) starts from it, and
prompts joining together share what they have in common (prefill.py). Rows decoding together must share
temperature, top-k and top-p (one sampler call); a request with other settings waits until the batch drains.
Loading new weights while rows decode is an error (a row samples from one policy version); between batches it
empties what finished rows left."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from mgrpo_actors.engines.base import Generation, SamplingParams, StopCheck, asks_stop_check
from mgrpo_actors.engines.decode import NARROW_AT, NARROW_MIN_ROWS, block_of, feeder, forward_block, row_generators
from mgrpo_actors.engines.kv_cache import CacheShape, RowCache, cache_shape, gathered, longest_prefix
from mgrpo_actors.engines.prefill import prepared_cache
from mgrpo_actors.engines.sampler import sample
from mgrpo_actors.phases import GENERATE, timed

__all__ = ["ADMIT_AFTER_STEPS", "ADMIT_SHARE", "HELD_BYTES", "HELD_ROWS", "ContinuousBatch"]

# Admitting rows copies every running row's keys and values into a new cache (kv_cache.gathered): about one
# decode step's attention reads. So waiting rows join when they are at least this share of the running rows, or
# have waited ADMIT_AFTER_STEPS steps, or nothing runs.
ADMIT_SHARE = 0.25
ADMIT_AFTER_STEPS = 8
# Finished rows whose keys and values are kept for the prompts that extend them: at most this many rows and bytes
# (the oldest go first; 2 GiB holds about 45 SmolLM2 rows of 1,000 tokens in fp32 each with its own copy of its
# prompt; a prefix that rows hold once, shared_prefix.py, counts once).
HELD_ROWS = 256
HELD_BYTES = 2 << 30


@dataclass
class _Row:
    """A running row: whose it is, how it samples, and what it sampled so far."""

    ticket: int
    generator: torch.Generator
    budget: int
    stop: frozenset[int]
    prompt_len: int
    check: StopCheck | None = None  # SamplingParams.stop_check
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stopped: bool = False  # a stop id, or the check, ended it
    last_candidate: int = 0  # len(ids) after the last of the check's candidates (0: none yet)

    def add(self, token: int, logprob: float) -> None:
        self.ids.append(token)
        self.logprobs.append(logprob)
        self.stopped = token in self.stop
        check = self.check
        if check is None or self.stopped:
            return
        since = len(self.ids) - self.last_candidate if self.last_candidate else 0
        if token in check.candidates:
            self.last_candidate = len(self.ids)
        self.stopped = asks_stop_check(check, token, since) and check(self.ids)

    def finished(self) -> bool:
        return self.stopped or len(self.ids) == self.budget


@dataclass(frozen=True)
class _Waiting:
    ticket: int
    prompt: tuple[int, ...]
    params: SamplingParams
    generator: torch.Generator


@dataclass(frozen=True)
class _Held:
    """A finished row's keys and values (a cache of its own), holding `tokens`, the first `prompt_len` its prompt."""

    cache: RowCache
    tokens: np.ndarray
    prompt_len: int
    bytes: int  # its own columns' (the prefix it holds, if any, is counted once for all rows that hold it)


class _Engine(Protocol):
    """What a ContinuousBatch reads of its engine (engines/hf.py HFEngine; not imported: hf.py imports this module)."""

    @property
    def model(self) -> torch.nn.Module: ...
    @property
    def row_cache(self) -> bool: ...
    @property
    def rng(self) -> torch.Generator: ...
    @property
    def pad_token_id(self) -> int: ...
    @property
    def eos_token_ids(self) -> set[int]: ...
    @property
    def policy_version(self) -> int: ...


def _warp(params: SamplingParams) -> tuple[float, int, float]:
    return (params.temperature, params.top_k, params.top_p)


class ContinuousBatch:
    """One running batch of an hf engine (`HFEngine.continuous_batch()`); see the module docstring."""

    def __init__(self, engine: _Engine) -> None:
        if not engine.row_cache:
            raise ValueError("continuous batching needs the hf engine's own cache (a Llama- or Qwen-style model)")
        self.engine = engine
        self._tickets = itertools.count()
        self._waiting: list[_Waiting] = []
        self._waited = 0  # steps the oldest waiting row has waited
        self._rows: list[_Row | None] = []  # the row of each cache row; None: finished (a hole until compacted)
        self._cache: RowCache | None = None
        self._logits: torch.Tensor | None = None  # [cache rows, vocab]: what each running row samples from next
        self._params: SamplingParams | None = None  # the running rows' temperature, top-k and top-p
        self._held: list[_Held] = []
        self._version = engine.policy_version

    @property
    def busy(self) -> bool:
        """Whether any row runs or waits."""
        return bool(self._waiting) or self.running > 0

    @property
    def running(self) -> int:
        """Rows decoding now."""
        return sum(row is not None for row in self._rows)

    def submit(self, prompt: Sequence[int], params: SamplingParams) -> int:
        """Queue one prompt's continuation; returns its ticket (step() hands the Generation back with it)."""
        if len(prompt) == 0:
            raise ValueError("every prompt needs at least one token")
        ticket = next(self._tickets)
        generator = row_generators(1, params.seed, self.engine.rng)[0]  # as generate([prompt], params) alone
        self._waiting.append(_Waiting(ticket, tuple(int(i) for i in prompt), params, generator))
        return ticket

    @timed(GENERATE)
    def step(self) -> list[tuple[int, Generation]]:
        """Admit waiting rows (ADMIT_SHARE), sample one token for every running row; the rows that finished, with
        their tickets, in row order."""
        self._check_version()
        with torch.inference_mode():
            self._admit()
            if self._cache is None:
                return []
            assert self._logits is not None and self._params is not None
            at = [i for i, row in enumerate(self._rows) if row is not None]
            rows = [self._rows[i] for i in at]
            ids, lps = sample(self._logits[at], self._params, [row.generator for row in rows])  # type: ignore[union-attr]
            done = self._record(at, ids.tolist(), lps.float().tolist())
            self._advance(at, ids)
        return done

    # ---- one step's parts ------------------------------------------------------------------------
    def _check_version(self) -> None:
        if self.engine.policy_version == self._version:
            return
        if self.running:
            raise RuntimeError(
                f"weights changed (version {self._version} -> {self.engine.policy_version}) while {self.running} "
                "rows were decoding: load weights between batches"
            )
        self._held, self._cache, self._rows, self._logits = [], None, [], None  # keys of old weights are never reused
        self._version = self.engine.policy_version

    def _record(self, at: list[int], ids: list[int], lps: list[float]) -> list[tuple[int, Generation]]:
        done: list[tuple[int, Generation]] = []
        finished: list[int] = []
        for i, token, logprob in zip(at, ids, lps, strict=True):
            row = self._rows[i]
            assert row is not None
            row.add(token, logprob)
            if row.finished():
                reason = "stop" if row.stopped else "length"
                values = np.asarray(row.logprobs, dtype=np.float32)
                if not np.isfinite(values).all():
                    raise RuntimeError(
                        "a sampled token has logprob -inf: sampling and logprobs used different distributions"
                    )
                done.append((row.ticket, Generation(row.ids, values, reason, self._version)))
                finished.append(i)
        if finished:
            self._hold(finished)
            for i in finished:
                self._rows[i] = None
        return done

    def _hold(self, finished: list[int]) -> None:
        """Keep each finished row's keys and values (copied out into a cache of its own, so the batch's cache can
        go and a row's memory goes with it) for later prompts, within HELD_ROWS and HELD_BYTES."""
        cache = self._cache
        assert cache is not None
        s = cache.shape
        per_token = s.layers * 2 * s.kv_heads * s.head_dim * torch.empty((), dtype=s.dtype).element_size()
        for i in finished:
            row = self._rows[i]
            assert row is not None
            kept = gathered(s, [(cache, i, len(cache.tokens[i]))], extra=0, keep_prefix=True)  # gathered from later
            tokens = np.asarray(kept.tokens[0], dtype=np.int64)
            self._held.append(_Held(kept, tokens, row.prompt_len, per_token * kept.capacity))
        while self._held and (len(self._held) > HELD_ROWS or self._held_bytes() > HELD_BYTES):
            self._held.pop(0)

    def _held_bytes(self) -> int:
        """What the held rows keep alive: their own columns, and each prefix they hold once."""
        prefixes = {id(held.cache.shared): held.cache.shared for held in self._held if held.cache.shared is not None}
        return sum(held.bytes for held in self._held) + sum(prefix.nbytes for prefix in prefixes.values())

    def _advance(self, at: list[int], ids: torch.Tensor) -> None:
        """Feed each still-running row its sampled id (finished rows get a hole), compacting a batch that is mostly
        holes."""
        assert self._cache is not None and self._logits is not None
        alive = [i for i in at if self._rows[i] is not None]
        if not alive:
            self._cache, self._rows, self._logits = None, [], None
            return
        sampled = dict(zip(at, ids.tolist(), strict=True))
        if len(alive) <= NARROW_AT * len(self._rows) and len(self._rows) - len(alive) >= NARROW_MIN_ROWS:
            self._cache = self._cache.select(alive, [len(self._cache.tokens[i]) for i in alive], self._room(alive))
            self._rows = [self._rows[i] for i in alive]
            sampled = {new: sampled[old] for new, old in enumerate(alive)}
            alive = list(range(len(alive)))
        self._feed_one(alive, sampled)

    def _room(self, rows: Sequence[int]) -> int:
        return max(row.budget - len(row.ids) for row in (self._rows[i] for i in rows) if row is not None)

    def _feed_one(self, alive: list[int], sampled: dict[int, int]) -> None:
        assert self._cache is not None
        tokens, on = [self.engine.pad_token_id] * len(self._rows), [False] * len(self._rows)
        for i in alive:
            tokens[i], on[i] = sampled[i], True
        device = self._cache.valid.device
        block = torch.tensor(tokens, dtype=torch.long, device=device)[:, None]
        valid = torch.tensor(on, dtype=torch.bool, device=device)[:, None]
        self._cache.reserve(1)
        self._logits = forward_block(self.engine.model, self._cache, block, valid)

    def _admit(self) -> None:
        """Move waiting rows into the batch (their prompts fed from what finished rows hold), if ADMIT_SHARE says so."""
        if not self._waiting:
            return
        running = self.running
        warp = _warp(self._params if running and self._params is not None else self._waiting[0].params)
        # in order of arrival, up to the first of other settings: that one goes first once the batch drains
        joining = list(itertools.takewhile(lambda w: _warp(w.params) == warp, self._waiting))
        self._waited += 1
        if not joining or (running and len(joining) < ADMIT_SHARE * running and self._waited < ADMIT_AFTER_STEPS):
            return
        admitted = {w.ticket for w in joining}
        self._waiting = [w for w in self._waiting if w.ticket not in admitted]
        self._waited = 0
        cache, logits = self._prefilled(joining)
        rows = [
            _Row(
                w.ticket,
                w.generator,
                w.params.max_new_tokens,
                self._stops(w.params),
                len(w.prompt),
                w.params.stop_check,
            )
            for w in joining
        ]
        if running:
            assert self._cache is not None and self._logits is not None
            alive = [i for i, row in enumerate(self._rows) if row is not None]
            picks = [(self._cache, i, len(self._cache.tokens[i])) for i in alive]
            picks += [(cache, j, len(cache.tokens[j])) for j in range(len(joining))]
            room = max(self._room(alive), max(w.params.max_new_tokens for w in joining))
            logits = torch.cat([self._logits[alive], logits])
            cache = gathered(cache.shape, picks, extra=room)
            rows = [self._rows[i] for i in alive] + rows  # type: ignore[misc]
        self._cache, self._logits, self._rows = cache, logits, rows  # type: ignore[assignment]
        self._params = joining[0].params

    def _stops(self, params: SamplingParams) -> frozenset[int]:
        return frozenset(self.engine.eos_token_ids | set(params.stop_token_ids))

    def _prefilled(self, joining: list[_Waiting]) -> tuple[RowCache, torch.Tensor]:
        """A cache of the joining rows holding their prompts, and each row's last-position logits."""
        engine, prompts = self.engine, [w.prompt for w in joining]
        shape = cache_shape(engine.model)
        base = self._held_prefixes(prompts, shape)
        budget = max(w.params.max_new_tokens for w in joining)
        cache, keep = prepared_cache(base, shape, prompts, budget, feeder(engine.model, engine.pad_token_id))
        suffixes = [p[n:] for p, n in zip(prompts, keep, strict=True)]
        logits = forward_block(engine.model, cache, *block_of(suffixes, engine.pad_token_id, cache.valid.device))
        return cache, logits

    def _held_prefixes(self, prompts: Sequence[Sequence[int]], shape: CacheShape) -> RowCache | None:
        """A cache of the held rows that the prompts extend (each prompt's longest), or None. A held row that a prompt
        continues past the row's own prompt (its episode's next turn) is let go: the row that continues it will be
        held when it finishes. Rows whose prompts are only shared (a system prompt) stay."""
        picks: dict[int, int] = {}  # held index -> tokens to take
        held_tokens = [held.tokens for held in self._held]
        for prompt in prompts:
            best, best_n = longest_prefix(held_tokens, prompt)
            if best is not None:
                picks[best] = max(picks.get(best, 0), best_n)
        if not picks:
            return None
        base = gathered(shape, [(self._held[h].cache, 0, n) for h, n in picks.items()], extra=0)
        extended = {h for h, n in picks.items() if n > self._held[h].prompt_len or n == len(self._held[h].tokens)}
        self._held = [held for h, held in enumerate(self._held) if h not in extended]
        return base
