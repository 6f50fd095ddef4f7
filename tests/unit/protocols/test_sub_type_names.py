"""Names of a run with several sub-agent types (issue 22, 1 + n): the default type keeps every name it had alone,
another type gets names of its own, and only a run's own sides have names."""

from __future__ import annotations

import pytest

from protocols import DEFAULT_SUB_TYPE, SIDES, Subjects, sides_of, validate_sub_type
from protocols.durables import DURABLES, WORK_DURABLES, durables, is_work_durable, work_durables
from protocols.subjects import stats_stream

# The names of a one-type run as they were before sub-agent types existed: a deployment rendered then, a run's
# saved consumers and a tap's filters go on working.
ONE_TYPE_STREAMS = {
    "mgrpo-r1-rollouts": ["mgrpo.r1.rollout.request"],
    "mgrpo-r1-traj-main": ["mgrpo.r1.traj.main"],
    "mgrpo-r1-traj-sub": ["mgrpo.r1.traj.sub"],
    "mgrpo-r1-stats": ["mgrpo.r1.stats"],
    "mgrpo-r1-batch-main": ["mgrpo.r1.batch.main"],
    "mgrpo-r1-batch-sub": ["mgrpo.r1.batch.sub"],
    "mgrpo-r1-steps": ["mgrpo.r1.step.>"],
    "mgrpo-r1-metrics": ["mgrpo.r1.metrics.>", "mgrpo.r1.events", "mgrpo.r1.query.done"],
    "mgrpo-r1-dlq": ["mgrpo.r1.dlq.>"],
}
ONE_TYPE_DURABLES = {  # name: (stream, filter, max_ack_pending), in order
    "controller": ("steps", "step.*.*", 256),
    "main-agents": ("rollouts", "", 256),
    "main-aligner-plans": ("steps", "step.start", 100_000),
    "main-aligner": ("traj-main", "", 100_000),
    "sub-aligner-plans": ("steps", "step.start", 100_000),
    "sub-aligner-stats": ("stats", "", 100_000),
    "sub-aligner": ("traj-sub", "", 100_000),
    "main-learner": ("batch-main", "", 10_000),
    "sub-learner": ("batch-sub", "", 10_000),
}


def test_a_one_type_run_keeps_every_name_it_had():
    s = Subjects("r1")
    assert s.sides == SIDES == ("main", "sub")
    assert s.streams() == ONE_TYPE_STREAMS
    assert s.subtask_requests == s.subtask_requests_of("sub") == "mgrpo.r1.subtask.request"
    assert s.reward_stats == s.reward_stats_of("sub") == "mgrpo.r1.stats"
    for side in ("main", "sub"):
        assert s.weights(side) == f"mgrpo.r1.weights.{side}"
        assert s.step_aligned(side) == f"mgrpo.r1.step.aligned.{side}"
        assert s.step_done(side) == f"mgrpo.r1.step.done.{side}"
    for specs in (DURABLES, durables(("sub",))):
        assert [(name, d.stream, d.filter, d.max_ack_pending) for name, d in specs.items()] == [
            (name, *spec) for name, spec in ONE_TYPE_DURABLES.items()
        ]
    assert WORK_DURABLES == ("main-aligner", "sub-aligner", "sub-aligner-stats", "main-learner", "sub-learner")


def test_each_sub_type_has_its_own_subjects_streams_and_durables():
    s = Subjects("r1", ("searcher", "calculator"))
    assert s.sides == ("main", "searcher", "calculator")
    assert s.subtask_requests_of("calculator") == "mgrpo.r1.subtask.request.calculator"
    assert s.reward_stats_of("searcher") == "mgrpo.r1.stats.searcher"
    assert s.trajectories("calculator") == "mgrpo.r1.traj.calculator"
    assert s.batches("searcher") == "mgrpo.r1.batch.searcher"
    streams = s.streams()
    assert streams["mgrpo-r1-stats-searcher"] == ["mgrpo.r1.stats.searcher"]
    assert streams["mgrpo-r1-traj-calculator"] == ["mgrpo.r1.traj.calculator"]
    assert "mgrpo-r1-traj-sub" not in streams and "mgrpo-r1-stats" not in streams
    subjects = [subject for captured in streams.values() for subject in captured]
    assert len(subjects) == len(set(subjects))  # no subject in two streams
    specs = durables(("searcher", "calculator"))
    assert specs["calculator-aligner-stats"].stream == "stats-calculator"
    assert specs["searcher-learner"].stream == "batch-searcher"
    assert set(work_durables(("searcher", "calculator"))) == {
        "main-aligner",
        "searcher-aligner",
        "calculator-aligner",
        "searcher-aligner-stats",
        "calculator-aligner-stats",
        "main-learner",
        "searcher-learner",
        "calculator-learner",
    }
    for name, spec in specs.items():  # every durable reads a stream of the run
        assert s.stream(spec.stream) in streams, name


def test_the_default_type_beside_others_keeps_its_names():
    s = Subjects("r1", ("sub", "calculator"))
    assert s.subtask_requests_of("sub") == "mgrpo.r1.subtask.request"
    assert s.reward_stats_of("sub") == "mgrpo.r1.stats"
    assert stats_stream("sub") == "stats" and stats_stream("calculator") == "stats-calculator"
    assert s.streams()["mgrpo-r1-stats-calculator"] == ["mgrpo.r1.stats.calculator"]


def test_only_a_runs_own_sides_have_names():
    s = Subjects("r1", ("searcher",))
    for make in (s.trajectories, s.batches, s.weights, s.step_done, s.step_aligned):
        with pytest.raises(ValueError, match="'sub' is invalid: expected one of main, searcher"):
            make("sub")
    with pytest.raises(ValueError, match="main side has no sub-agent subjects"):
        s.subtask_requests_of("main")
    with pytest.raises(ValueError, match="main side has no sub-agent subjects"):
        s.reward_stats_of("main")


@pytest.mark.parametrize("bad", ["", "Searcher", "web-search", "web.search", "1calc", "a" * 33, "main", "tools"])
def test_sub_type_names_are_validated(bad):
    with pytest.raises(ValueError, match="sub-agent type"):
        validate_sub_type(bad)
    with pytest.raises(ValueError):
        Subjects("r1", (bad,))


def test_a_run_has_at_least_one_type_and_no_type_twice():
    with pytest.raises(ValueError, match="at least one"):
        sides_of(())
    with pytest.raises(ValueError, match="twice"):
        Subjects("r1", ("calc", "calc"))
    assert sides_of() == ("main", DEFAULT_SUB_TYPE)
    assert validate_sub_type("calc_2") == "calc_2"


@pytest.mark.parametrize("bad", ["sub", ["searcher"]])
def test_sub_types_are_a_tuple_of_names(bad):
    with pytest.raises(ValueError, match="tuple of names"):
        Subjects("r1", bad)
    with pytest.raises(ValueError, match="tuple of names"):
        durables(bad)


def test_a_work_durable_is_known_by_its_name_for_any_sub_agent_type():
    """The permission renderer (deploy/access.py) knows a stream's one reader from the durable's name alone: every
    work durable of a run with named types is one, a plan, controller or main-agents durable is not."""
    types = ("searcher", "calc")
    assert all(is_work_durable(name) for name in work_durables(types))
    assert all(is_work_durable(name) for name in WORK_DURABLES)
    others = set(durables(types)) - set(work_durables(types))
    assert others and not any(is_work_durable(name) for name in others)
    assert not is_work_durable("main-aligner-stats") and not is_work_durable("tool-learner")
