"""The sides as NATS accounts in a run with several sub-agent types (deploy/accounts.py, actors/roles.py): each type's
roles live in its own account (SUB for the default type, SUB_<TYPE> for a named one), every crossing has its two
ends, a type's side crosses with MAIN (and TOOLS, MONITOR) only, never with another type's, each account provisions
what its roles use, and the permissions keep each type to its own subjects (the rendered users and accounts:
test_render_sub_types.py). Two named types ("searcher", "calculator") and a mix with the default type ("sub",
"calc"). No network."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from actors.roles import ROLES, role_accesses, role_user
from mgrpo_actors.deploy.access import permissions
from mgrpo_actors.deploy.accounts import (
    CROSSINGS,
    account_resources,
    accounts_of,
    crossings,
    crossings_into,
    crossings_out_of,
    sub_account,
)
from mgrpo_actors.deploy.provision import everything
from protocols import Subjects
from protocols.durables import durables
from protocols.subjects import stats_stream
from tests.account_checks import (
    MIX,
    TWO,
    TYPE_SETS,
    assert_crossing_has_both_ends,
    assert_every_subscription_finds_its_other_end,
    assert_no_side_data_crosses,
    assert_no_subject_crosses_both_ways,
    types_id,
)


def _case_id(value: object) -> str:
    return types_id(value) if isinstance(value, tuple) else str(value)


def _perm(types: tuple[str, ...], user: str):
    return permissions(role_accesses(types)[user], "r1", "_INBOX.x")


# ---- where the roles live ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        (
            TWO,
            {
                "controller": "MAIN",
                "main-agent": "MAIN",
                "searcher-agent": "SUB_SEARCHER",
                "calculator-agent": "SUB_CALCULATOR",
                "tool": "TOOLS",
                "main-aligner": "MAIN",
                "searcher-aligner": "SUB_SEARCHER",
                "calculator-aligner": "SUB_CALCULATOR",
                "main-learner": "MAIN",
                "searcher-learner": "SUB_SEARCHER",
                "calculator-learner": "SUB_CALCULATOR",
                "monitor": "MONITOR",
            },
        ),
        (
            MIX,
            {
                "controller": "MAIN",
                "main-agent": "MAIN",
                "sub-agent": "SUB",
                "calc-agent": "SUB_CALC",
                "tool": "TOOLS",
                "main-aligner": "MAIN",
                "sub-aligner": "SUB",
                "calc-aligner": "SUB_CALC",
                "main-learner": "MAIN",
                "sub-learner": "SUB",
                "calc-learner": "SUB_CALC",
                "monitor": "MONITOR",
            },
        ),
    ],
    ids=["two", "mix"],
)
def test_every_role_user_lives_in_its_sides_account(types, expected):
    """A sub side's role once per type (`<type>-agent`, the default type keeps `sub-agent`) in that type's account;
    the main side and controller in MAIN, tools in TOOLS, the monitor in MONITOR."""
    accesses = role_accesses(types)
    assert {name: access.account for name, access in accesses.items()} == expected
    assert accounts_of(types) == ("MAIN", *(sub_account(t) for t in types), "TOOLS", "MONITOR")


def test_sub_account_and_role_user_name_a_type():
    """`sub_account`: SUB for the default type, SUB_<TYPE> else, refusing a bad or reserved name; `role_user`: only
    a sub side's role takes a named type's name."""
    assert (sub_account(), sub_account("sub"), sub_account("searcher")) == ("SUB", "SUB", "SUB_SEARCHER")
    for bad in ("main", "Bad", "a-b", ""):
        with pytest.raises(ValueError):
            sub_account(bad)
    assert role_user("sub-aligner", "searcher") == "searcher-aligner" and role_user("sub-learner") == "sub-learner"
    assert role_user("main-agent", "searcher") == "main-agent" and role_user("tool", "calc") == "tool"


# ---- crossings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("types", "crossing"),
    [(types, c) for types in TYPE_SETS for c in crossings(types)],
    ids=lambda v: _case_id(v) if isinstance(v, tuple) else f"{v.source}:{v.subject}",
)
def test_every_crossing_has_a_source_in_its_account_and_a_user_in_each_importer(types, crossing):
    """A stream crossing is published in its source and read in every importer; a service is answered in its
    source and called from every importer (over the roles of a run with several types)."""
    assert_crossing_has_both_ends(role_accesses(types), crossing, types)


@pytest.mark.parametrize(
    ("types", "account"), [(types, a) for types in TYPE_SETS for a in accounts_of(types)], ids=_case_id
)
def test_every_subscription_and_call_of_a_role_finds_its_other_end(types, account):
    """What a role subscribes to is published in its account, crosses into it, or is a service it answers for
    callers in its account or the accounts it exports it to; what it calls is answered there or crosses in."""
    assert_every_subscription_finds_its_other_end(role_accesses(types), account, crossings(types))


@pytest.mark.parametrize("types", TYPE_SETS, ids=types_id)
def test_no_subject_crosses_both_ways_between_two_accounts(types):
    """nats-server refuses an import that forms a cycle: between any two accounts the subjects one way never
    overlap those the other way."""
    assert_no_subject_crosses_both_ways(accounts_of(types), crossings(types))


@pytest.mark.parametrize("types", TYPE_SETS, ids=types_id)
def test_no_trajectory_batch_weights_dlq_or_node_subject_crosses(types):
    """No trajectories, batches, weights, dead letters or pings cross sides, whatever the types."""
    assert_no_side_data_crosses(crossings(types))


@pytest.mark.parametrize("types", TYPE_SETS, ids=types_id)
def test_a_types_side_crosses_with_main_tools_and_monitor_only(types):
    """Nothing crosses between two sub-agent types' accounts: a type's account imports from MAIN and TOOLS only,
    exports into MAIN and MONITOR only, and takes none of another type's subjects."""
    run_crossings, subs = crossings(types), {sub_account(t) for t in types}
    for c in run_crossings:
        assert not ({c.source} & subs and set(c.into) & subs), c
    s = Subjects("r", types)
    for t in types:
        account = sub_account(t)
        assert {c.source for c in crossings_into(account, run_crossings)} == {"MAIN", "TOOLS"}
        assert {a for c in crossings_out_of(account, run_crossings) for a in c.into} == {"MAIN", "MONITOR"}
        assert {c.subject for c in crossings_into(account, run_crossings)} == {
            "events",
            "tool.*",
            "step.start",
            s.relative(s.reward_stats_of(t)),
        }


@pytest.mark.parametrize(
    ("types", "t", "main_to_sub", "sub_to_main"),
    [
        (
            TWO,
            "searcher",
            ["events", "stats.searcher", "step.start"],
            ["step.aligned.searcher", "step.done.searcher", "subtask.request.searcher"],
        ),
        (
            TWO,
            "calculator",
            ["events", "stats.calculator", "step.start"],
            ["step.aligned.calculator", "step.done.calculator", "subtask.request.calculator"],
        ),
        (MIX, "sub", ["events", "stats", "step.start"], ["step.aligned.sub", "step.done.sub", "subtask.request"]),
        (
            MIX,
            "calc",
            ["events", "stats.calc", "step.start"],
            ["step.aligned.calc", "step.done.calc", "subtask.request.calc"],
        ),
    ],
    ids=["searcher", "calculator", "mix-sub", "mix-calc"],
)
def test_what_crosses_between_main_and_a_type_is_the_design_list(types, t, main_to_sub, sub_to_main):
    """MAIN -> a type: its scalar stats, step plans and events; the type -> MAIN: its subtask service and its step
    events (the default type keeps its subjects from before several types)."""
    run_crossings, account = crossings(types), sub_account(t)
    assert sorted(c.subject for c in crossings_out_of("MAIN", run_crossings) if account in c.into) == main_to_sub
    assert sorted(c.subject for c in crossings_out_of(account, run_crossings) if "MAIN" in c.into) == sub_to_main
    services = [c.subject for c in crossings_out_of(account, run_crossings) if c.service]
    assert services == [sub_to_main[-1]]


# ---- what each account provisions --------------------------------------------------------------------


@pytest.mark.parametrize("types", TYPE_SETS, ids=types_id)
def test_each_types_account_provisions_only_its_own_streams_buckets_and_durables(types):
    """A type's account: its trajectories, batches and stats, steps, metrics, dead letters; its state and versions
    KV, its weights store, its aligner's and learner's durables, and nothing of another type or of MAIN."""
    accesses = role_accesses(types)
    for t in types:
        got = account_resources(accesses, sub_account(t))
        assert set(got.streams) == {f"traj-{t}", f"batch-{t}", stats_stream(t), "steps", "metrics", "dlq"}, t
        assert set(got.kv) == {f"state-{t}", f"versions-{t}"} and got.objects == (f"weights-{t}",), t
        assert set(got.durables) == {f"{t}-aligner-plans", f"{t}-aligner-stats", f"{t}-aligner", f"{t}-learner"}, t


@pytest.mark.parametrize("types", TYPE_SETS, ids=types_id)
def test_main_provisions_every_types_stats_stream_and_nothing_else_of_a_type(types):
    """MAIN keeps each type's stats stream (the main agent's js publishes need one in its account), and none of a
    type's trajectories, batches, KV, weights or durables."""
    main = account_resources(role_accesses(types), "MAIN")
    assert set(main.streams) == {
        "metrics",
        "dlq",
        "rollouts",
        "traj-main",
        "steps",
        "batch-main",
        *(stats_stream(t) for t in types),
    }
    assert set(main.kv) == {"state", "state-main", "versions-main"} and main.objects == ("weights-main",)
    assert set(main.durables) == {"controller", "main-agents", "main-aligner-plans", "main-aligner", "main-learner"}
    for account in ("TOOLS", "MONITOR"):
        other = account_resources(role_accesses(types), account)
        assert set(other.streams) == {"metrics", "dlq"} and not other.kv and not other.objects and not other.durables


@pytest.mark.parametrize("types", TYPE_SETS, ids=types_id)
def test_the_accounts_together_provision_everything_of_the_run(types):
    """The union over the accounts of what each provisions is `everything` of the run (a server without accounts),
    and its durables are the run's declared durables."""
    made = everything(SimpleNamespace(run_id="r1", subjects=Subjects("r1", types)))
    assert made.durables == tuple(durables(types))
    assert set(made.streams) == set(Subjects("r1", types).stream_names())
    per_account = [account_resources(role_accesses(types), a) for a in accounts_of(types)]
    for kind in ("streams", "kv", "objects", "durables"):
        union = {what for got in per_account for what in getattr(got, kind)}
        assert union == set(getattr(made, kind)), kind


# ---- permissions -----------------------------------------------------------------------------------


def test_a_types_learner_publishes_only_its_own_weights():
    """The searcher learner announces searcher weights, never the calculator's or the main agent's."""
    p = _perm(TWO, "searcher-learner")
    assert p.may_publish("mgrpo.r1.weights.searcher")
    assert not p.may_publish("mgrpo.r1.weights.calculator") and not p.may_publish("mgrpo.r1.weights.main")
    assert p.may_publish("$KV.mgrpo-r1-versions-searcher.latest.searcher")
    assert not p.may_publish("$KV.mgrpo-r1-versions-calculator.latest.calculator")


def test_a_types_agent_serves_only_its_own_subtasks():
    """The calculator agent subscribes to calculator subtasks, not the searcher's nor the default type's."""
    p = _perm(TWO, "calculator-agent")
    assert p.may_subscribe("mgrpo.r1.subtask.request.calculator")
    assert not p.may_subscribe("mgrpo.r1.subtask.request.searcher") and not p.may_subscribe("mgrpo.r1.subtask.request")
    assert p.may_subscribe("mgrpo.r1.weights.calculator") and not p.may_subscribe("mgrpo.r1.weights.searcher")


@pytest.mark.parametrize("types", TYPE_SETS, ids=types_id)
def test_only_a_types_aligner_publishes_its_batches_and_only_its_learner_its_weights(types):
    """Per side, exactly one user may publish its batches (its aligner) and one its weights (its learner)."""
    accesses, s = role_accesses(types), Subjects("r1", types)
    for side in s.sides:
        assert [u for u in accesses if _perm(types, u).may_publish(s.batches(side))] == [f"{side}-aligner"]
        assert [u for u in accesses if _perm(types, u).may_publish(s.weights(side))] == [f"{side}-learner"]


def test_the_main_agent_informs_and_calls_every_type():
    """The main agent publishes each type's stats and requests each type's subtasks; no sub user does either."""
    p = _perm(TWO, "main-agent")
    for t in TWO:
        assert p.may_publish(f"mgrpo.r1.stats.{t}") and p.may_publish(f"mgrpo.r1.subtask.request.{t}"), t
    assert not p.may_publish("mgrpo.r1.stats") and not p.may_publish("mgrpo.r1.subtask.request")
    for user in ("searcher-agent", "searcher-aligner", "calculator-learner"):
        assert not _perm(TWO, user).may_publish("mgrpo.r1.stats.searcher"), user
        assert not _perm(TWO, user).may_publish("mgrpo.r1.subtask.request.calculator"), user


@pytest.mark.parametrize("types", TYPE_SETS, ids=types_id)
def test_each_work_streams_one_reader_may_purge_it_for_every_type(types):
    """runtime/retention.py: a type's aligner removes what it consumed of its trajectories and stats, its learner of
    its batches (the Bus declares their durables work_durables(sub_types)); nobody else may purge them."""
    accesses, s = role_accesses(types), Subjects("r1", types)
    owners = {"main-aligner": {"traj-main"}, "main-learner": {"batch-main"}}
    for t in types:
        owners[role_user("sub-aligner", t)] = {f"traj-{t}", stats_stream(t)}
        owners[role_user("sub-learner", t)] = {f"batch-{t}"}
    names = s.stream_names()
    for user in accesses:
        p = _perm(types, user)
        purged = {what for what in names if p.may_publish(f"$JS.API.STREAM.PURGE.{s.stream(what)}")}
        assert purged == owners.get(user, set()), user


# ---- the default type is unchanged ----------------------------------------------------------------------


def test_the_default_type_keeps_its_layout():
    """With no types named: CROSSINGS, the four accounts, one user per role named as the role."""
    assert crossings() == CROSSINGS == crossings(("sub",))
    assert accounts_of() == ("MAIN", "SUB", "TOOLS", "MONITOR")
    assert list(role_accesses()) == list(ROLES) and role_accesses() == role_accesses(("sub",))
