"""Subject permissions of the per-role NATS users: NATS subject matching, the allow lists one
`RoleAccess` renders to for a run (checked by hand on a small case), and what the role table lets
each role touch (only learners publish weights, only aligners publish batches, each learner consumes
only its own side's batches, no role creates a stream). No network."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.roles import ROLES, role_accesses
from mgrpo_actors.config.node import STREAM_NAMES
from mgrpo_actors.deploy.access import Permissions, RoleAccess, common_access, permissions, subject_matches
from protocols import SIDES, Subjects

RUN = "r1"


def _role(name: str, run_id: str = RUN, **kwargs) -> Permissions:
    return permissions(role_accesses()[name], run_id, f"_INBOX.{name}", **kwargs)


# ---- subject_matches -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.c", False),
        ("a.b", "a.b.c", False),  # exact tokens: no prefix match
        ("a.b.c", "a.b", False),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),  # `*` is exactly one token
        ("a.*", "a", False),
        ("*.b", "a.b", True),
        ("a.*.c", "a.x.c", True),
        ("a.>", "a.b", True),
        ("a.>", "a.b.c.d", True),  # `>` is one or more tokens
        ("a.>", "a", False),  # ... never zero
        ("a.>", "b.c", False),
        (">", "a", True),
        ("a.*.>", "a.b", False),
        ("a.*.>", "a.b.c", True),
        ("ab", "a", False),  # whole tokens, not characters
    ],
)
def test_subject_matches_follows_nats_semantics(pattern, subject, expected):
    """`*` one token, a final `>` one or more, every other token literally."""
    assert subject_matches(pattern, subject) is expected


def _reference_match(pattern: str, subject: str) -> bool:
    parts = ["[^.]+" if t == "*" else r"[^.]+(\.[^.]+)*" if t == ">" else re.escape(t) for t in pattern.split(".")]
    return re.fullmatch(r"\.".join(parts), subject) is not None


_TOKENS = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4)
_PATTERNS = st.builds(
    lambda toks, tail: ".".join([*toks, *([">"] if tail else [])]),
    st.lists(st.sampled_from(["a", "b", "*"]), max_size=4),
    st.booleans(),
).filter(bool)  # literal and `*` tokens, optionally a final `>`


@settings(max_examples=300)
@given(_PATTERNS, _TOKENS.map(".".join))
def test_subject_matches_agrees_with_a_regex_reference(pattern, subject):
    """Against a regex translation of the same rules (`*` = one token, final `>` = one or more)."""
    assert subject_matches(pattern, subject) is _reference_match(pattern, subject)


@given(_TOKENS.map(".".join))
def test_a_literal_subject_matches_itself_and_the_full_wildcard_matches_all(subject):
    """Any subject matches itself and `>`; `prefix.>` never matches the bare prefix."""
    assert subject_matches(subject, subject)
    assert subject_matches(">", subject)
    assert not subject_matches(f"{subject}.>", subject)
    assert subject_matches(f"{subject}.>", f"{subject}.x")


# ---- Permissions -----------------------------------------------------------------------------


def test_may_publish_and_may_subscribe_use_their_own_list():
    """The publish list does not grant subscriptions and vice versa."""
    p = Permissions(publish=["x.>"], subscribe=["y.*"])
    assert p.may_publish("x.1.2") and not p.may_subscribe("x.1")
    assert p.may_subscribe("y.1") and not p.may_publish("y.1")
    assert not Permissions().may_publish("x") and not Permissions().may_subscribe("x")


def _dedup(items: list[str]) -> list[str]:
    return [x for i, x in enumerate(items) if x not in items[:i]]


_NAMES = st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=6)


@given(_NAMES, _NAMES, _NAMES, _NAMES)
def test_merged_keeps_first_seen_order_and_drops_duplicates(pub_a, sub_a, pub_b, sub_b):
    """`merged` = self's entries then other's new ones, each once, in first-seen order."""
    merged = Permissions(pub_a, sub_a).merged(Permissions(pub_b, sub_b))
    assert merged.publish == _dedup([*pub_a, *pub_b])
    assert merged.subscribe == _dedup([*sub_a, *sub_b])


# ---- permissions(access, run_id, inbox_prefix) -----------------------------------------------

_LEARNER_LIKE = RoleAccess(
    publish=("batch.main",), durables=(("batch-main", "main-learner"),), kv_write=(("state", "learner.main"),)
)


def test_permissions_of_a_small_access_by_hand():
    """Common part first, then the role's subjects, stream/consumer/ack APIs (bind, pull, ack: never
    create; the one reader of a work stream also purges what it acknowledged) and its KV key, each once."""
    p = permissions(_LEARNER_LIKE, "r1", "_INBOX.x")
    assert p.publish == [
        "mgrpo.r1.events",
        "mgrpo.r1.metrics.>",
        "mgrpo.r1.dlq.>",
        "$JS.API.STREAM.INFO.mgrpo-r1-metrics",
        "$JS.API.STREAM.INFO.mgrpo-r1-dlq",
        "mgrpo.r1.batch.main",
        "$JS.API.STREAM.INFO.mgrpo-r1-batch-main",
        "$JS.API.CONSUMER.INFO.mgrpo-r1-batch-main.main-learner",
        "$JS.API.CONSUMER.MSG.NEXT.mgrpo-r1-batch-main.main-learner",
        "$JS.ACK.mgrpo-r1-batch-main.main-learner.>",
        "$JS.API.STREAM.PURGE.mgrpo-r1-batch-main",
        "$JS.API.STREAM.INFO.KV_mgrpo-r1-state",
        "$JS.API.STREAM.MSG.GET.KV_mgrpo-r1-state",
        "$JS.API.DIRECT.GET.KV_mgrpo-r1-state",
        "$JS.API.DIRECT.GET.KV_mgrpo-r1-state.>",
        "$KV.mgrpo-r1-state.learner.main",
    ]
    assert p.subscribe == ["_INBOX.x.>", "mgrpo.r1.node.ping", "mgrpo.r1.events"]


def test_permissions_without_until_finished_drop_only_the_events_subscription():
    """`until_finished=False`: the node still publishes events but no longer listens to them."""
    with_events, without = (
        permissions(_LEARNER_LIKE, "r1", "_INBOX.x"),
        permissions(_LEARNER_LIKE, "r1", "_INBOX.x", until_finished=False),
    )
    assert without.subscribe == ["_INBOX.x.>", "mgrpo.r1.node.ping"]
    assert without.publish == with_events.publish
    assert "events" not in common_access(until_finished=False).subscribe


def test_empty_access_still_gets_the_common_part():
    """Every node: its inbox, pings, events, metrics, dead letters, and the metrics/dlq streams."""
    p = permissions(RoleAccess(), "r1", "_INBOX.n")
    assert p.subscribe[0] == "_INBOX.n.>"
    assert {"mgrpo.r1.node.ping", "mgrpo.r1.events"} <= set(p.subscribe)
    assert {"mgrpo.r1.events", "mgrpo.r1.metrics.>", "mgrpo.r1.dlq.>"} <= set(p.publish)
    assert p.may_publish("mgrpo.r1.metrics.main.loss") and p.may_publish("mgrpo.r1.dlq.tool.search")
    assert not p.may_publish("mgrpo.r1.batch.main")


def _well_formed(pattern: str) -> bool:
    tokens = pattern.split(".")
    return all(tokens) and ">" not in tokens[:-1] and all(t in ("*", ">") or not set(t) & set("*> \t") for t in tokens)


_RUN_IDS = st.from_regex(r"\A[A-Za-z0-9_-]{1,12}\Z")


@settings(max_examples=25)
@given(_RUN_IDS)
def test_every_role_permission_is_well_formed_and_scoped_to_the_run(run_id):
    """Wildcards only as whole tokens, `>` only last; each entry names the run (subject token or
    `mgrpo-<run>-` stream/bucket name) except the inbox and the stream-name listing."""
    for name in ROLES:
        p = _role(name, run_id)
        for pattern in [*p.publish, *p.subscribe]:
            assert _well_formed(pattern), (name, pattern)
            scoped = pattern.startswith(f"mgrpo.{run_id}.") or f"mgrpo-{run_id}-" in pattern
            assert scoped or pattern in (f"_INBOX.{name}.>", "$JS.API.STREAM.NAMES"), (name, pattern)
        assert p.subscribe[0] == f"_INBOX.{name}.>"
        assert len(set(p.publish)) == len(p.publish) and len(set(p.subscribe)) == len(p.subscribe)


# ---- the role table ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ROLES))
def test_no_role_may_create_update_or_delete_a_stream(name):
    """Streams and buckets are made by `admin` (mgrpo deploy provision), never by a role."""
    p, s = _role(name), Subjects(RUN)
    assert not any(
        x.startswith(("$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE.", "$JS.API.STREAM.DELETE.")) for x in p.publish
    )
    for stream in s.streams():
        for api in ("CREATE", "UPDATE", "DELETE"):
            assert not p.may_publish(f"$JS.API.STREAM.{api}.{stream}"), (name, api, stream)
    assert not p.may_publish("$JS.API.STREAM.CREATE.forged")


@pytest.mark.parametrize("name", list(ROLES))
def test_no_role_may_create_or_update_a_consumer(name):
    """A consumer's creator can have the server deliver onto any subject of its account: no role gets
    CONSUMER.CREATE (its durables are provisioned, its object reads are message gets, its replays direct gets)."""
    p, s = _role(name), Subjects(RUN)
    assert not any(x.startswith(("$JS.API.CONSUMER.CREATE", "$JS.API.CONSUMER.DURABLE.CREATE")) for x in p.publish), (
        name
    )
    for stream in [*s.streams(), f"OBJ_{s.bucket('weights-main')}", f"OBJ_{s.bucket('weights-sub')}"]:
        assert not p.may_publish(f"$JS.API.CONSUMER.CREATE.{stream}") and not p.may_publish(
            f"$JS.API.CONSUMER.CREATE.{stream}.x.>"
        ), (name, stream)


@pytest.mark.parametrize("name", list(ROLES))
def test_every_role_has_the_common_part(name):
    """Pings answered, events heard, events/metrics/dead letters out."""
    p, s = _role(name), Subjects(RUN)
    assert p.may_subscribe(s.node_ping) and p.may_subscribe(s.events)
    assert p.may_publish(s.events) and p.may_publish(s.metrics("x")) and p.may_publish(s.dlq(s.tool("search")))


@pytest.mark.parametrize("side", SIDES)
def test_only_that_sides_learner_publishes_its_weights(side):
    """Weight announcements of a side come from its learner alone."""
    s = Subjects(RUN)
    assert [n for n in ROLES if _role(n).may_publish(s.weights(side))] == [f"{side}-learner"]


@pytest.mark.parametrize("side", SIDES)
def test_only_that_sides_aligner_publishes_its_batches(side):
    """A learner trains only on batches its own side's aligner published."""
    s = Subjects(RUN)
    assert [n for n in ROLES if _role(n).may_publish(s.batches(side))] == [f"{side}-aligner"]


def _pulls(p: Permissions) -> set[str]:
    prefix = "$JS.API.CONSUMER.MSG.NEXT."
    return {x[len(prefix) :] for x in p.publish if x.startswith(prefix)}


def test_each_role_pulls_only_its_own_durables():
    """The `$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>` each role may send, by hand from the table."""
    expected = {
        "controller": {"mgrpo-r1-steps.controller"},
        "main-agent": {"mgrpo-r1-rollouts.main-agents"},
        "sub-agent": set(),
        "tool": set(),
        "main-aligner": {"mgrpo-r1-steps.main-aligner-plans", "mgrpo-r1-traj-main.main-aligner"},
        "sub-aligner": {
            "mgrpo-r1-steps.sub-aligner-plans",
            "mgrpo-r1-stats.sub-aligner-stats",
            "mgrpo-r1-traj-sub.sub-aligner",
        },
        "main-learner": {"mgrpo-r1-batch-main.main-learner"},
        "sub-learner": {"mgrpo-r1-batch-sub.sub-learner"},
        "monitor": set(),
    }
    assert {name: _pulls(_role(name)) for name in ROLES} == expected


@pytest.mark.parametrize("side", SIDES)
def test_a_learner_consumes_only_its_own_sides_batch_stream(side):
    """No consumer API on the other side's batch stream (create, next, ack)."""
    other = "sub" if side == "main" else "main"
    p, s = _role(f"{side}-learner"), Subjects(RUN)
    stream = s.stream(f"batch-{other}")
    for subject in (
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{other}-learner",
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}.x",
        f"$JS.ACK.{stream}.{other}-learner.1.1.1.1.1",
        f"$JS.API.STREAM.MSG.GET.{stream}",
    ):
        assert not p.may_publish(subject), subject
    assert not p.may_subscribe(s.batches(other))


def test_only_the_tool_role_subscribes_to_tool_requests():
    """Tool requests are served by tool nodes alone (agents only send them)."""
    s = Subjects(RUN)
    for tool in ("search", "visit"):
        assert [n for n in ROLES if _role(n).may_subscribe(s.tool(tool))] == ["tool"]
    assert [n for n in ROLES if _role(n).may_publish(s.tool("search"))] == ["main-agent", "sub-agent"]


def test_the_sub_learner_may_write_nothing_of_the_main_side():
    """No entry of its publish list names the main side, and no main-side write is allowed."""
    p, s = _role("sub-learner"), Subjects(RUN)
    assert not [x for x in p.publish if "main" in x]
    state, weights = s.bucket("state-main"), s.bucket("versions-main")
    for subject in (
        s.weights("main"),
        s.batches("main"),
        s.step_done("main"),
        s.step_aligned("main"),
        s.trajectories("main"),
        f"$KV.{state}.learner.main",
        f"$KV.{weights}.latest.main",
        f"$O.{s.bucket('weights-main')}.C.x",
        f"$JS.API.STREAM.PURGE.OBJ_{s.bucket('weights-main')}",
        f"$JS.API.CONSUMER.MSG.NEXT.{s.stream('batch-main')}.main-learner",
    ):
        assert not p.may_publish(subject), subject


def test_a_role_of_one_run_gets_nothing_of_another_run():
    """Permissions are written per run: run a's aligner cannot publish run b's batches."""
    p, other = _role("main-aligner", "a"), Subjects("b")
    assert p.may_publish(Subjects("a").batches("main"))
    assert not p.may_publish(other.batches("main")) and not p.may_publish(
        f"$JS.API.STREAM.INFO.{other.stream('batch-main')}"
    )


def test_each_work_streams_one_reader_and_nobody_else_may_purge_it():
    """runtime/retention.py: the aligners purge their trajectory (and reward-report) streams, the learners their
    batch streams; no role may purge any other stream (the plans, the metrics, the rollout requests)."""
    owners = {
        "main-aligner": {"traj-main"},
        "sub-aligner": {"traj-sub", "stats"},
        "main-learner": {"batch-main"},
        "sub-learner": {"batch-sub"},
    }
    s = Subjects("r1")
    for name in ROLES:
        p = _role(name)
        purged = {what for what in STREAM_NAMES if p.may_publish(f"$JS.API.STREAM.PURGE.{s.stream(what)}")}
        assert purged == owners.get(name, set()), name
