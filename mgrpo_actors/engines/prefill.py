"""Where a call's prompts start from: a RowCache whose row i already holds all it can of prompts[i],
with what the prompts share computed once.

Three sources of reuse, cheapest first:
1. the previous call's cache (an episode's history; RowCache.match finds each prompt's longest cached
   prefix, and several prompts may start from the same cached row);
2. the prefix every prompt of the call shares (a system prompt and its worked example), fed once as one
   row when the cache does not hold it yet;
3. identical prompts (the K rollouts of one question), each distinct one fed once.
Only the last id of each prompt is always left to feed: its logits start the sampling (decode.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mgrpo_actors.engines.kv_cache import CacheShape, RowCache, common_prefix

__all__ = ["MIN_SHARED", "Feed", "prepared_cache"]

# A shared prefix shorter than this is not worth a pass of its own.
MIN_SHARED = 32

# feed(cache, suffixes): forward each row's suffix (ids the row does not hold yet) into the cache.
Feed = Callable[[RowCache, Sequence[Sequence[int]]], None]


def _empty(shape: CacheShape) -> RowCache:
    return RowCache(shape, rows=1, capacity=1)


def _extended(base: RowCache, prompts: Sequence[Sequence[int]], feed: Feed, extra: int = 0) -> RowCache:
    """A cache with one row per prompt, each holding the prompt but its last id (the cached part from
    `base`, the rest fed now), with room for `extra` more columns."""
    sources, keep = base.match(prompts)
    missing = [len(p) - 1 - n for p, n in zip(prompts, keep, strict=True)]
    cache = base.select(sources, keep, extra=max(missing) + extra)
    if max(missing) > 0:
        feed(cache, [p[n : len(p) - 1] for p, n in zip(prompts, keep, strict=True)])
    return cache


def prepared_cache(
    previous: RowCache | None, shape: CacheShape, prompts: Sequence[Sequence[int]], extra: int, feed: Feed
) -> tuple[RowCache, list[int]]:
    """(cache, keep): row i of the cache holds prompts[i][:keep[i]], and has room for `extra` more
    columns besides prompts[i][keep[i]:]. `previous` is left as it was."""
    base = previous if previous is not None else _empty(shape)
    distinct = list(dict.fromkeys(tuple(p) for p in prompts))
    if len(distinct) > 1:
        shared = min(common_prefix(distinct[0], other) for other in distinct[1:])
        cached = base.match([distinct[0][: shared + 1]])[1][0] if shared else 0
        if shared - cached >= MIN_SHARED:  # 2. the shared prefix, once
            base = _extended(base, [distinct[0][: shared + 1]], feed)
    if len(distinct) < len(prompts):  # 3. each distinct prompt once
        base = _extended(base, distinct, feed)
    sources, keep = base.match(prompts)
    new_tokens = max(len(p) - n for p, n in zip(prompts, keep, strict=True))
    return base.select(sources, keep, extra=new_tokens + extra), keep
