"""Every subject, stream and bucket name is scoped by the run id; invalid run ids and name parts are
rejected with a message saying what is allowed. No network."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import SIDES, Subjects, validate_run_id

VALID_RUN_ID = st.from_regex(r"\A[A-Za-z0-9_-]{1,64}\Z")
# NATS subject tokens may not hold these; stream names may not hold dots, spaces, wildcards or slashes.
_SUBJECT_CHARS = re.compile(r"^[A-Za-z0-9_.>*-]+$")


def _all_subjects(s: Subjects) -> list[str]:
    subjects = [
        s.all,
        s.rollout_requests,
        s.subtask_requests,
        s.tool("search"),
        s.reward_stats,
        s.events,
        s.node_ping,
        s.metrics(),
        s.metrics("loss"),
        s.dlq(),
        s.dlq("mgrpo.x.y"),
    ]
    for side in SIDES:
        subjects += [s.trajectories(side), s.batches(side), s.weights(side), s.step_done(side)]
    for subjects_of_stream in s.streams().values():
        subjects += subjects_of_stream
    return subjects


@settings(max_examples=100)
@given(VALID_RUN_ID)
def test_every_name_is_scoped_by_the_run_id(run_id):
    s = Subjects(run_id)
    for subject in _all_subjects(s):
        assert subject.startswith(f"mgrpo.{run_id}."), subject
        assert _SUBJECT_CHARS.match(subject), subject
        assert subject.split(".")[1] == run_id  # the run id is exactly one token
    for name in [*s.streams(), s.bucket("stats"), s.bucket("weights"), s.bucket("state")]:
        assert name.startswith(f"mgrpo-{run_id}-"), name
        assert "." not in name and " " not in name and "*" not in name and ">" not in name


def test_two_runs_share_no_subject_stream_or_bucket():
    a, b = Subjects("run-a"), Subjects("run-b")
    assert not set(_all_subjects(a)) & set(_all_subjects(b))
    assert not set(a.streams()) & set(b.streams())
    assert a.bucket("stats") != b.bucket("stats")


def test_concrete_names():
    s = Subjects("r1")
    assert s.tool("search") == "mgrpo.r1.tool.search"
    assert s.trajectories("sub") == "mgrpo.r1.traj.sub"
    assert s.batches("main") == "mgrpo.r1.batch.main"
    assert s.all == "mgrpo.r1.>"
    assert s.stream("traj-main") == "mgrpo-r1-traj-main"
    assert s.bucket("stats") == "mgrpo-r1-stats"


def test_dead_letter_subject_mirrors_the_original_subject_without_the_run_prefix():
    s = Subjects("r1")
    assert s.dlq("mgrpo.r1.tool.search") == "mgrpo.r1.dlq.tool.search"
    assert s.dlq("elsewhere.x") == "mgrpo.r1.dlq.elsewhere.x"
    assert s.dlq() == "mgrpo.r1.dlq.>"


def test_every_stream_captures_distinct_subjects():
    streams = Subjects("r1").streams()
    captured = [subject for subjects in streams.values() for subject in subjects]
    assert len(captured) == len(set(captured))
    assert Subjects("r1").dlq() in streams["mgrpo-r1-dlq"]


@pytest.mark.parametrize(
    "bad", ["", "a.b", "a b", "a*", "a>", "run/1", "ü", "x" * 65, "tab\t", "r1\n", "r1\r\n", "mgrpo.>", None, 7, b"r1"]
)
def test_invalid_run_ids_are_rejected_with_what_is_allowed(bad):
    with pytest.raises(ValueError) as err:
        validate_run_id(bad)  # type: ignore[arg-type]
    assert "A-Z a-z 0-9 _ -" in str(err.value) and "run id" in str(err.value)
    with pytest.raises(ValueError):
        Subjects(bad)  # type: ignore[arg-type]


@settings(max_examples=200)
@given(st.text(max_size=70))
def test_run_id_validation_matches_its_rule(text):
    ok = re.fullmatch(r"[A-Za-z0-9_-]{1,64}", text) is not None
    if ok:
        assert validate_run_id(text) == text
    else:
        with pytest.raises(ValueError):
            validate_run_id(text)


@pytest.mark.parametrize("bad", ["a.b", "", "x y", "*", ">", "search\n"])
def test_name_parts_are_validated(bad):
    s = Subjects("r1")
    for make in (s.tool, s.stream, s.bucket):
        with pytest.raises(ValueError) as err:
            make(bad)
        assert repr(bad) in str(err.value)


@pytest.mark.parametrize("bad", ["left", "", "MAIN", "main.x"])
def test_sides_are_validated(bad):
    s = Subjects("r1")
    for make in (s.trajectories, s.batches, s.weights, s.step_done):
        with pytest.raises(ValueError) as err:
            make(bad)
        assert "main, sub" in str(err.value)
