"""The pool probe (warmup/pool_probe.py): which candidates make the pool, and the settings it needs."""

from __future__ import annotations

import pytest

from mgrpo_actors.config import ConfigError, NodeConfig, load_config
from mgrpo_actors.warmup.pool_probe import ProbedQuestion, choose_pool


def test_questions_answered_sometimes_come_first_nearest_to_half_in_candidate_order():
    probed = [
        ProbedQuestion("a", 4, 4),  # always: nothing to learn
        ProbedQuestion("b", 1, 4),
        ProbedQuestion("c", 0, 4),  # never: nothing to learn
        ProbedQuestion("d", 2, 4),
        ProbedQuestion("e", 3, 4),
        ProbedQuestion("f", 2, 4),
    ]
    assert [q.mixed for q in probed] == [False, True, False, True, True, True]
    assert choose_pool(probed, 2) == ["d", "f"]  # both at 1/2
    assert choose_pool(probed, 3) == ["b", "d", "f"]  # then 1/4 and 3/4 tie at 1/4 from half: b comes first
    assert choose_pool(probed, 4) == ["b", "d", "e", "f"]
    # too few mixed: the rest by the same rule (4/4 and 0/4 are both 1/2 from half: a before c)
    assert choose_pool(probed, 5) == ["a", "b", "d", "e", "f"]
    assert choose_pool(probed, 6) == ["a", "b", "c", "d", "e", "f"]
    with pytest.raises(ValueError, match="cannot choose pipeline.question_pool 7 questions from 6 candidates"):
        choose_pool(probed, 7)


def test_thirds_tie_exactly():
    # 1/3 and 2/3 are as far from half; in floats |1/3 - 1/2| != |2/3 - 1/2|, so the tie must be exact
    probed = [ProbedQuestion("a", 1, 3), ProbedQuestion("b", 2, 3), ProbedQuestion("c", 3, 3)]
    assert abs(1 / 3 - 0.5) != abs(2 / 3 - 0.5)
    assert choose_pool(probed, 1) == ["a"]  # tied with b: candidate order


# The tiny models on a small web: a probe of 4 candidates × 2 rollouts takes seconds.
_TINY = (
    "agents.main.model=tiny:main",
    "agents.sub.model=tiny:sub",
    "tools.web_entities=150",
    "pipeline.pool_probe_rollouts=2",
    "pipeline.pool_probe_candidates=4",
)


def _config(*overrides: str) -> NodeConfig:
    return load_config(NodeConfig, None, ["pipeline.queries_per_step=3", "pipeline.question_pool=3", *overrides])


def test_the_probe_tries_three_times_the_pool_unless_told():
    assert _config("pipeline.pool_probe_rollouts=4").pipeline.probe_candidates == 9
    assert _config("pipeline.pool_probe_rollouts=4", "pipeline.pool_probe_candidates=5").pipeline.probe_candidates == 5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["pipeline.pool_probe_rollouts=1"], "one rollout cannot disagree"),
        (["pipeline.pool_probe_rollouts=4", "pipeline.question_pool=0"], "set pipeline.question_pool > 0"),
        (["pipeline.pool_probe_rollouts=4", "pipeline.pool_probe_candidates=2"], "cannot fill a question_pool of 3"),
        (["pipeline.pool_probe_rollouts=4", "pipeline.stage1_steps=2", "pipeline.steps=8"], "a run in one stage"),
        (["pipeline.question_ids=[a, b]"], "at least queries_per_step"),
        (["pipeline.question_ids=[a, b, a]"], "each once"),
    ],
)
def test_settings_the_probe_cannot_serve_are_refused(overrides, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        _config(*overrides)


def test_the_probe_rolls_out_every_candidate_chooses_and_is_cached(tmp_path, monkeypatch):
    from mgrpo_actors.warmup import pool_probe

    monkeypatch.setattr(pool_probe, "cache_root", lambda: tmp_path)
    config = _config(*_TINY, f"run.dir={tmp_path / 'runs'}")
    first = pool_probe.probe_pool(config)
    assert not first.cached and first.seconds > 0
    assert [q.rollouts for q in first.probed] == [2, 2, 2, 2]
    assert all(0 <= q.correct <= 2 for q in first.probed)
    assert first.pool == choose_pool(first.probed, 3)
    assert len(list((tmp_path / "pool-probes").glob("*.json"))) == 1

    said: list[str] = []
    resolved = pool_probe.resolve_pool(config, said.append)  # the cached outcome: no rollout this time
    assert resolved.pipeline.question_ids == first.pool
    assert "4 candidate questions × 2 rollouts" in said[0] and "reused from the cache" in said[0]
    again = pool_probe.probe_pool(config)
    assert again.cached and again.probed == first.probed and again.pool == first.pool
    # the run keeps the pool it started with; resumed without the cache, it takes that pool, not a new probe's
    kept = pool_probe.kept_pool_path(config)
    assert kept == tmp_path / "runs" / "default.question-pool.json"  # beside the run directory a fresh run clears
    assert kept.is_file()
    monkeypatch.setattr(pool_probe, "cache_root", lambda: tmp_path / "gone")
    resumed = pool_probe.resolve_pool(config, said.append, resume=True)
    assert resumed.pipeline.question_ids == first.pool and "as the run started it" in said[-1]
    assert not (tmp_path / "gone").exists()
    monkeypatch.setattr(pool_probe, "cache_root", lambda: tmp_path)
    # another seed draws other candidates: another entry
    pool_probe.probe_pool(_config(*_TINY, "run.seed=1"))
    assert len(list((tmp_path / "pool-probes").glob("*.json"))) == 2
    # an explicit pool is left as it is
    named = _config(*_TINY, "pipeline.question_ids=[x, y, z]")
    assert pool_probe.resolve_pool(named, said.append) is named
