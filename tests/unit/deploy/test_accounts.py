"""The sides as NATS accounts (deploy/accounts.py): every crossing is one the roles need and the design
allows (no trajectory, batch, weights or store subject crosses), every subscription and service call
of a role finds its publisher in its own account or through a crossing, no subject crosses both ways
between two accounts (the server refuses such a cycle), the rendered exports name their importers,
and what each account's admin provisions is what the roles there use. No network."""

from __future__ import annotations

import pytest

from actors.roles import role_accesses
from mgrpo_actors.deploy.accounts import (
    ACCOUNTS,
    CROSSINGS,
    Crossing,
    account_block,
    account_resources,
    crossings_into,
    crossings_out_of,
)
from tests.account_checks import (
    assert_crossing_has_both_ends,
    assert_every_subscription_finds_its_other_end,
    assert_no_side_data_crosses,
    assert_no_subject_crosses_both_ways,
)

ACCESSES = role_accesses()


def test_every_role_lives_in_one_of_the_accounts_by_its_side():
    """Main side roles and the controller in MAIN, sub side roles in SUB, tools in TOOLS, the monitor in MONITOR."""
    assert {name: access.account for name, access in ACCESSES.items()} == {
        "controller": "MAIN",
        "main-agent": "MAIN",
        "main-aligner": "MAIN",
        "main-learner": "MAIN",
        "sub-agent": "SUB",
        "sub-aligner": "SUB",
        "sub-learner": "SUB",
        "tool": "TOOLS",
        "monitor": "MONITOR",
    }


@pytest.mark.parametrize("crossing", CROSSINGS, ids=lambda c: f"{c.source}:{c.subject}")
def test_every_crossing_has_a_source_in_its_account_and_a_user_in_each_importer(crossing):
    """A stream crossing is published in its source and read in every importer; a service is answered
    in its source and called from every importer. Nothing crosses that nobody needs."""
    assert_crossing_has_both_ends(ACCESSES, crossing)


def test_no_trajectory_batch_weights_or_store_subject_crosses():
    """docs/architecture.md §Sides and what crosses them: no trajectories, tokens, logprobs, gradients or weights
    cross sides."""
    assert_no_side_data_crosses(CROSSINGS)


def test_what_crosses_between_the_two_sides_is_the_design_list():
    """MAIN -> SUB: the scalar stats, step plans and events; SUB -> MAIN: the subtask service and the sub step
    events."""
    main_to_sub = sorted(c.subject for c in crossings_out_of("MAIN") if "SUB" in c.into)
    sub_to_main = sorted(c.subject for c in crossings_out_of("SUB") if "MAIN" in c.into)
    assert main_to_sub == ["events", "stats", "step.start"]
    assert sub_to_main == ["step.aligned.sub", "step.done.sub", "subtask.request"]
    assert crossings_out_of("MONITOR") == [] and {c.subject for c in crossings_into("MONITOR")} == {
        "events",
        "metrics.>",
        "query.done",
    }


@pytest.mark.parametrize("account", ACCOUNTS)
def test_every_subscription_and_call_of_a_role_finds_its_other_end(account):
    """What a role subscribes to (besides pings and its inbox) is published in its account, crosses into
    it, or is a service it answers for callers in its account or in the accounts it exports it to;
    what it calls is answered in its account or crosses into it as a service."""
    assert_every_subscription_finds_its_other_end(ACCESSES, account, CROSSINGS)


def test_no_subject_crosses_both_ways_between_two_accounts():
    """nats-server refuses to start when an import forms a cycle: subjects one way never overlap the other way."""
    assert_no_subject_crosses_both_ways(ACCOUNTS, CROSSINGS)


def test_account_block_renders_exports_naming_importers_and_imports_per_run():
    """Exports are restricted to the importing accounts; each crossing is rendered for every run id."""
    text = account_block("MAIN", ['      { user: "u", password: "h" }'], ["r1", "r2"])
    assert text.startswith("  MAIN: {\n    jetstream: enabled\n    users: [")
    assert (
        '{ stream: "mgrpo.r1.stats", accounts: ["SUB"] }' in text
        and '{ stream: "mgrpo.r2.stats", accounts: ["SUB"] }' in text
    )
    assert '{ service: { account: "SUB", subject: "mgrpo.r1.subtask.request" } }' in text
    # a service's answer may come back within the reply window
    sub = account_block("SUB", [], ["r1"], reply_window_s=900)
    assert '{ service: "mgrpo.r1.subtask.request", accounts: ["MAIN"], response_threshold: "900s" }' in sub
    assert '{ stream: "mgrpo.r1.step.done.sub", accounts: ["MAIN"] }' in sub
    assert '{ stream: { account: "SUB", subject: "mgrpo.r2.step.done.sub" } }' in text
    assert "traj" not in text and "batch" not in text
    monitor = account_block("MONITOR", [], ["r1"])
    assert "exports" not in monitor and monitor.count("{ stream: { account:") == 7


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": "NOWHERE", "into": ("MAIN",)}, "unknown account 'NOWHERE'"),
        ({"source": "MAIN", "into": ("MAIN",)}, "cannot import its own subject"),
    ],
)
def test_a_crossing_with_a_bad_account_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Crossing("x", False, why="test", **kwargs)


def test_each_account_provisions_what_its_roles_use():
    """MAIN keeps the work queue, the main trajectories and batches, stats and steps (its js publishes
    need them) and the main KV/object stores; SUB the sub ones plus its own stats and steps streams;
    TOOLS and MONITOR only metrics and dead letters."""
    main, sub, tools, monitor = (account_resources(ACCESSES, a) for a in ACCOUNTS)
    assert set(main.streams) == {"metrics", "dlq", "rollouts", "traj-main", "stats", "steps", "batch-main"}
    assert set(main.kv) == {"state", "state-main", "versions-main"} and main.objects == ("weights-main",)
    assert set(sub.streams) == {"metrics", "dlq", "traj-sub", "stats", "steps", "batch-sub"}
    assert set(sub.kv) == {"state-sub", "versions-sub"} and sub.objects == ("weights-sub",)
    assert set(tools.streams) == set(monitor.streams) == {"metrics", "dlq"} and not tools.kv and not monitor.objects
    assert set(main.durables) == {"controller", "main-agents", "main-aligner-plans", "main-aligner", "main-learner"}
    assert (
        set(sub.durables) == {"sub-aligner-plans", "sub-aligner-stats", "sub-aligner", "sub-learner"}
        and not tools.durables
        and not monitor.durables
    )


@pytest.mark.parametrize(
    ("flag", "user", "expected"),
    [
        ("auto", "admin-sub", "SUB"),
        ("auto", "admin-monitor", "MONITOR"),
        ("auto", "", None),
        ("auto", "ops", None),
        ("TOOLS", "ops", "TOOLS"),
    ],
)
def test_provision_takes_the_account_of_an_admin_user_unless_told(flag, user, expected):
    """`mgrpo deploy provision`: --account wins; else an `admin-<account>` user names it; else
    everything (None: a server without accounts keeps every stream in one)."""
    import argparse

    from mgrpo_actors.cli.deploy import _account

    assert _account(argparse.Namespace(account=flag), user) == expected


def test_everything_is_every_stream_and_bucket_of_the_run():
    """What provision makes without an account: every stream of Subjects.streams, every KV bucket and both object
    stores."""
    from types import SimpleNamespace

    from mgrpo_actors.deploy.provision import RUN_BUCKETS, everything
    from protocols import Subjects

    made = everything(SimpleNamespace(run_id="r1", subjects=Subjects("r1")))
    assert set(made.streams) == {
        "rollouts",
        "traj-main",
        "traj-sub",
        "stats",
        "batch-main",
        "batch-sub",
        "steps",
        "metrics",
        "dlq",
    }
    assert made.kv == RUN_BUCKETS and made.objects == ("weights-main", "weights-sub")
    from protocols.durables import DURABLES

    assert made.durables == tuple(DURABLES)
    union = {what for account in ACCOUNTS for what in account_resources(ACCESSES, account).streams}
    assert union == set(made.streams)  # the accounts together keep every stream of the run
