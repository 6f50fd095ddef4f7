"""The rendered users and accounts of a run with several sub-agent types (deploy/server_config.py,
deploy/accounts.py, deploy/description.py, cli/deploy.py): a user per role user and an admin and a tap per account
(one per type's account included), each type's account block with its service crossing, a bad type refused, and
`mgrpo deploy provision --account` taking a type's account from its admin. Two named types ("searcher",
"calculator") and a mix with the default type ("sub", "calc"); the accounts and crossings themselves:
test_accounts_sub_types.py. No network."""

from __future__ import annotations

import argparse

import pytest

from actors.roles import role_accesses
from mgrpo_actors.cli.deploy import _account
from mgrpo_actors.deploy.accounts import account_block, accounts_of, crossings
from mgrpo_actors.deploy.description import DeploymentDescription
from mgrpo_actors.deploy.server_config import admin_user, security_sections, tap_user, user_specs
from tests.account_checks import MIX, TWO, TYPE_SETS, types_id

# ---- rendering ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("types", TYPE_SETS, ids=types_id)
def test_user_specs_are_the_role_users_then_admin_and_tap_per_account(types):
    """A user per role user in its account, then per account (one per type included) an unrestricted admin and a
    read-only tap; every name once."""
    accesses = role_accesses(types)
    users = user_specs(DeploymentDescription(run_ids=["r1"], sub_types=list(types)), accesses)
    per_account = [name for a in accounts_of(types) for name in (admin_user(a), tap_user(a))]
    assert [u.name for u in users] == [*accesses, *per_account]
    assert len({u.name for u in users}) == len(users)
    by_name = {u.name: u for u in users}
    assert all(by_name[name].account == access.account for name, access in accesses.items())
    for account in accounts_of(types):
        assert by_name[admin_user(account)].account == by_name[tap_user(account)].account == account
        assert by_name[admin_user(account)].permissions is None
    if types == TWO:
        assert "admin-sub_searcher" in by_name and by_name["tap-sub_calculator"].account == "SUB_CALCULATOR"


def test_a_types_tap_reads_only_its_accounts_streams():
    """tap-sub_searcher may direct-get the searcher's streams, not the calculator's nor MAIN's own."""
    users = user_specs(DeploymentDescription(run_ids=["r1"], sub_types=list(TWO)), role_accesses(TWO))
    tap = {u.name: u for u in users}["tap-sub_searcher"].permissions
    assert tap.may_publish("$JS.API.DIRECT.GET.mgrpo-r1-traj-searcher")
    assert not tap.may_publish("$JS.API.DIRECT.GET.mgrpo-r1-traj-calculator")
    assert not tap.may_publish("$JS.API.DIRECT.GET.mgrpo-r1-traj-main")


def test_security_sections_render_each_types_account_and_its_service_crossing():
    """The accounts section has one block per type's account, in order; SUB_SEARCHER exports its subtask service to
    MAIN, MAIN imports it, and MONITOR imports every account's events and metrics and MAIN's query progress."""
    description = DeploymentDescription(run_ids=["r1"], sub_types=list(TWO))
    users = user_specs(description, role_accesses(TWO))
    text = security_sections(users, {u.name: "$2b$10$h" for u in users}, None, False, 2.0, ["r1"], sub_types=TWO)
    heads = [f"  {a}: {{" for a in accounts_of(TWO)]
    assert all(text.count(h) == 1 for h in heads) and [text.index(h) for h in heads] == sorted(
        text.index(h) for h in heads
    )
    assert "  SUB: {" not in text
    main = text.split("  MAIN: {")[1].split("  SUB_SEARCHER: {")[0]
    searcher = text.split("  SUB_SEARCHER: {")[1].split("  SUB_CALCULATOR: {")[0]
    assert '{ service: "mgrpo.r1.subtask.request.searcher", accounts: ["MAIN"]' in searcher
    assert '{ service: { account: "SUB_SEARCHER", subject: "mgrpo.r1.subtask.request.searcher" } }' in main
    assert '{ stream: "mgrpo.r1.stats.searcher", accounts: ["SUB_SEARCHER"] }' in main
    assert '{ user: "searcher-agent"' in searcher and '{ user: "calculator-agent"' not in searcher
    assert "traj" not in main.split("imports: [")[1] and "calculator" not in searcher.split("exports: [")[1]
    monitor = account_block("MONITOR", [], ["r1"], run_crossings=crossings(TWO))
    assert "exports" not in monitor and monitor.count("{ stream: { account:") == 9


@pytest.mark.parametrize(
    ("sub_types", "message"),
    [(["main"], "reserved"), (["a", "a"], "twice"), (["Bad"], "invalid"), ([], "at least one"), (["a-b"], "invalid")],
)
def test_a_description_with_a_bad_sub_type_is_refused(sub_types, message):
    """A reserved, repeated, badly spelled or missing type cannot name an account."""
    with pytest.raises(ValueError, match=message):
        DeploymentDescription(sub_types=sub_types)


# ---- mgrpo deploy provision --account ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "user", "types", "expected"),
    [
        ("auto", "admin-sub_searcher", TWO, "SUB_SEARCHER"),
        ("auto", "admin-sub_calculator", TWO, "SUB_CALCULATOR"),
        ("auto", "admin-main", TWO, "MAIN"),
        ("auto", "admin-sub_searcher", ("sub",), None),
        ("auto", "admin-sub", TWO, None),
        ("auto", "admin-sub", MIX, "SUB"),
        ("SUB_CALC", "ops", MIX, "SUB_CALC"),
    ],
)
def test_provision_takes_the_account_of_a_types_admin(flag, user, types, expected):
    """An `admin-sub_<type>` user names its type's account when the run has that type, and none otherwise."""
    assert _account(argparse.Namespace(account=flag), user, types) == expected


@pytest.mark.parametrize(("flag", "types"), [("SUB_OTHER", TWO), ("SUB", TWO), ("SUB_SEARCHER", ("sub",))])
def test_provision_refuses_an_account_the_run_does_not_have(flag, types):
    """--account must be one of the run's accounts (its types come from the run's config)."""
    with pytest.raises(ValueError, match=f"--account {flag}"):
        _account(argparse.Namespace(account=flag), "ops", types)


def test_security_sections_refuse_a_user_in_no_account_of_the_types():
    """A role user rendered for other sub-agent types than the accounts' is an error, not a user silently left out."""
    users = user_specs(DeploymentDescription(run_ids=["r1"], sub_types=list(TWO)), role_accesses(TWO))
    with pytest.raises(ValueError, match=r"searcher-agent.*live in no account of sub-agent types sub"):
        security_sections(users, {u.name: "h" for u in users}, None, False, 2.0, ["r1"])


@pytest.mark.parametrize(
    ("user", "rendered"),
    [
        ("admin-main", True),
        ("admin-sub", True),
        ("admin-sub_searcher", True),
        ("admin-monitor", True),
        ("admin-ops", False),
        ("ops", False),
    ],
)
def test_provision_knows_the_admin_users_nats_config_renders(user, rendered):
    """`mgrpo deploy provision` refuses a rendered admin whose account the run does not have (its config was left
    out), and leaves any other user to provision everything (a server without accounts)."""
    from mgrpo_actors.deploy.server_config import is_admin_user

    assert is_admin_user(user) is rendered
