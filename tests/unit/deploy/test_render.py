"""The deployment description and what `mgrpo deploy nats-config` renders from it: its validation,
the users (one per role in its account; per account an unrestricted admin and a read-only tap), the
servers' `accounts`/`tls` sections,
password files (mode 0600, kept on re-render, only bcrypt hashes in the server config) and the node
`nats` sections. No network; bcrypt costs ~60 ms a user, so few renders of few users."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
import yaml

from actors.roles import ROLES, role_accesses
from mgrpo_actors.config import ConfigError, from_dict
from mgrpo_actors.deploy.access import Permissions
from mgrpo_actors.deploy.accounts import ACCOUNTS
from mgrpo_actors.deploy.description import DeploymentDescription, JetStreamSettings, ServerAddress, TlsSettings
from mgrpo_actors.deploy.server_config import (
    TAP_USER,
    UserSpec,
    _user_block,
    admin_user,
    render_deployment,
    security_sections,
    tap_user,
    user_specs,
)

ADMIN_USER = admin_user("MAIN")
PER_ACCOUNT = [name for account in ACCOUNTS for name in (admin_user(account), tap_user(account))]

# ---- DeploymentDescription ---------------------------------------------------------------------


def _servers(n: int) -> list[ServerAddress]:
    return [ServerAddress(name=f"n{i}", host=f"10.0.0.{i}") for i in range(1, n + 1)]


def test_the_default_description_is_one_local_server_with_tls():
    """Defaults: one server on 127.0.0.1:4222, TLS on, run `default`."""
    d = DeploymentDescription()
    assert d.urls() == "tls://127.0.0.1:4222" and d.run_ids == ["default"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"servers": _servers(2)}, "2 servers cannot lose one"),
        ({"servers": []}, "at least one server"),
        (
            {
                "servers": [
                    ServerAddress(name="a", host="h1"),
                    ServerAddress(name="a", host="h2"),
                    ServerAddress(name="b"),
                ]
            },
            "unique",
        ),
        ({"servers": _servers(1), "jetstream": JetStreamSettings(replicas=3)}, "jetstream.replicas"),
        ({"servers": _servers(3), "jetstream": JetStreamSettings(replicas=4)}, "jetstream.replicas"),
        ({"run_ids": ["bad.run"]}, "run id 'bad.run' is invalid"),
        ({"run_ids": []}, "at least one run id"),
        ({"max_payload": 10}, "max_payload"),
    ],
)
def test_an_invalid_description_is_refused_naming_the_problem(kwargs, message):
    """Two servers, duplicate names, more replicas than servers, bad run ids, tiny payloads."""
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        DeploymentDescription(**kwargs)


def test_three_servers_with_three_replicas_are_accepted():
    """A 3-server cluster may keep 3 replicas."""
    assert DeploymentDescription(servers=_servers(3), jetstream=JetStreamSettings(replicas=3)).jetstream.replicas == 3


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"name": "a b"}, "servers[].name"),
        ({"name": ""}, "servers[].name"),
        ({"client_port": 0}, "client_port"),
        ({"monitor_port": 70000}, "monitor_port"),
    ],
)
def test_a_bad_server_address_is_refused(kwargs, key):
    """Server names are tokens; ports are 1-65535."""
    with pytest.raises(ValueError, match=re.escape(key)):
        ServerAddress(**kwargs)


def test_urls_follow_the_tls_setting_or_the_override():
    """`tls://` with TLS on, `nats://` off; `urls(tls=...)` overrides; servers in order."""
    on = DeploymentDescription(servers=_servers(3))
    assert on.urls() == "tls://10.0.0.1:4222,tls://10.0.0.2:4222,tls://10.0.0.3:4222"
    assert on.urls(tls=False) == "nats://10.0.0.1:4222,nats://10.0.0.2:4222,nats://10.0.0.3:4222"
    off = DeploymentDescription(tls=TlsSettings(enabled=False))
    assert off.urls() == "nats://127.0.0.1:4222" and off.urls(tls=True) == "tls://127.0.0.1:4222"


def test_a_description_loads_from_a_mapping_with_a_servers_list():
    """The loader builds ServerAddress items from the list; unset keys keep their defaults."""
    d = from_dict(
        DeploymentDescription,
        {
            "servers": [
                {"name": "a", "host": "h1"},
                {"name": "b", "host": "h2", "client_port": 4333},
                {"name": "c", "host": "h3"},
            ],
            "run_ids": ["r1", "r2"],
            "tls": {"enabled": False},
            "jetstream": {"replicas": 3},
        },
    )
    assert d.servers == [ServerAddress("a", "h1"), ServerAddress("b", "h2", client_port=4333), ServerAddress("c", "h3")]
    assert d.urls() == "nats://h1:4222,nats://h2:4333,nats://h3:4222"
    assert d.tls == TlsSettings(enabled=False) and d.jetstream.replicas == 3 and d.run_ids == ["r1", "r2"]


def test_a_bad_mapping_is_a_config_error():
    """Two servers or an unknown server key fail as ConfigError (what `mgrpo deploy` reports)."""
    with pytest.raises(ConfigError, match="2 servers"):
        from_dict(DeploymentDescription, {"servers": [{"name": "a"}, {"name": "b"}]})
    with pytest.raises(ConfigError, match=re.escape("servers[0].hots")):
        from_dict(DeploymentDescription, {"servers": [{"hots": "x"}]})


# ---- users and sections ---------------------------------------------------------------------------

ACCESSES = role_accesses()


def test_user_specs_are_one_per_role_then_admin_and_tap_per_account():
    """Each role a user of its name in its role's account with inbox `_INBOX.<role>`; per account an
    unrestricted admin and a tap that reads the run there (its streams only)."""
    users = user_specs(DeploymentDescription(run_ids=["r1"]), ACCESSES)
    assert [u.name for u in users] == [*ROLES, *PER_ACCOUNT]
    assert PER_ACCOUNT == [
        "admin-main",
        "tap-main",
        "admin-sub",
        "tap-sub",
        "admin-tools",
        "tap-tools",
        "admin-monitor",
        TAP_USER,
    ]
    assert all(u.inbox_prefix == f"_INBOX.{u.name}" for u in users)
    by_name = {u.name: u for u in users}
    assert {name: by_name[name].account for name in ROLES} == {name: ACCESSES[name].account for name in ROLES}
    assert (
        [by_name[admin_user(a)].account for a in ACCOUNTS]
        == list(ACCOUNTS)
        == [by_name[tap_user(a)].account for a in ACCOUNTS]
    )
    admins = {admin_user(a) for a in ACCOUNTS}
    assert all(by_name[a].permissions is None for a in admins)
    assert all(
        u.permissions is not None and u.permissions.publish and u.permissions.subscribe
        for u in users
        if u.name not in admins
    )
    tap = by_name["tap-main"].permissions
    assert tap.may_subscribe("mgrpo.r1.batch.main") and tap.may_publish("mgrpo.r1.node.ping")
    assert not tap.may_publish("mgrpo.r1.batch.main") and not tap.may_publish("$KV.mgrpo-r1-state.learner.main")
    assert tap.may_publish("$JS.API.DIRECT.GET.mgrpo-r1-batch-main") and not tap.may_publish(
        "$JS.API.DIRECT.GET.mgrpo-r1-batch-sub"
    )
    creating = (
        "$JS.API.CONSUMER.CREATE",
        "$JS.API.CONSUMER.DURABLE.CREATE",
        "$JS.API.CONSUMER.DELETE",
        "$JS.API.STREAM.CREATE",
        "$JS.API.STREAM.UPDATE",
    )
    # only the admins
    assert not any(p.startswith(creating) for user in users if user.permissions for p in user.permissions.publish)
    monitor_tap = by_name[TAP_USER].permissions  # MONITOR keeps only the metrics and dead-letter streams
    assert monitor_tap.may_publish("$JS.API.STREAM.INFO.mgrpo-r1-metrics") and not monitor_tap.may_publish(
        "$JS.API.STREAM.INFO.mgrpo-r1-steps"
    )
    taps = [u for u in users if u.name.startswith("tap")]
    assert len(taps) == 4 and not any(u.answers for u in taps)
    # every role's user answers requests it received; admins (unrestricted) and taps (they see everything) never
    assert security_sections(users, {u.name: "$2b$10$h" for u in users}, None, False, 2.0, ["r1"]).count(
        'allow_responses: { max: 1, expires: "3600s" }'
    ) == len(users) - len(admins) - len(taps)


def test_a_role_without_a_known_account_is_refused():
    """Every role's user lives in one of the accounts; a role declared without one is an error, not a user of
    nowhere."""
    from mgrpo_actors.deploy.access import RoleAccess

    with pytest.raises(ValueError, match="role odd: account 'SIDEWAYS'"):
        user_specs(DeploymentDescription(), {"odd": RoleAccess("SIDEWAYS", publish=("x",))})


def test_user_specs_allow_each_run_of_the_description():
    """With two run ids a role's user may work on both, and on no other."""
    learner = {u.name: u for u in user_specs(DeploymentDescription(run_ids=["r1", "r2"]), ACCESSES)}[
        "main-learner"
    ].permissions
    assert learner.may_publish("mgrpo.r1.weights.main") and learner.may_publish("mgrpo.r2.weights.main")
    assert not learner.may_publish("mgrpo.r3.weights.main")
    assert len(set(learner.publish)) == len(learner.publish)


def test_security_sections_restrict_roles_and_leave_admin_unrestricted():
    """Restricted users get allow lists and `allow_responses` (once, within the reply window); admin gets no
    permissions block; each user sits in its account's block."""
    users = [
        UserSpec(
            "tool", "_INBOX.tool", Permissions(["mgrpo.r1.events"], ["_INBOX.tool.>", "mgrpo.r1.tool.*"]), "TOOLS"
        ),
        UserSpec(ADMIN_USER, "_INBOX.admin", None, "MAIN"),
    ]
    text = security_sections(users, {"tool": "$2b$10$h1", ADMIN_USER: "$2b$10$h2"}, None, False, 2.0, ["r1"])
    assert "tls {" not in text and text.startswith("accounts {") and "authorization" not in text
    assert (
        text.index('{ user: "admin-main"')
        < text.index("  SUB: {")
        < text.index("  TOOLS: {")
        < text.index('{ user: "tool"')
        < text.index("  MONITOR: {")
    )
    admin_block, tool_block = text.split("  TOOLS: {")[0], text.split("  TOOLS: {")[1].split("  MONITOR: {")[0]
    assert (
        '{ user: "tool", password: "$2b$10$h1"' in tool_block
        and 'allow_responses: { max: 1, expires: "3600s" }' in tool_block
    )
    assert (
        'publish: { allow: ["mgrpo.r1.events"] }' in tool_block
        and 'subscribe: { allow: ["_INBOX.tool.>", "mgrpo.r1.tool.*"] }' in tool_block
    )
    assert "permissions" not in admin_block and "allow_responses" not in admin_block and '"$2b$10$h2"' in admin_block


def test_a_tap_user_may_read_but_never_answer_a_request():
    """A tap user sees every request of its account: with allow_responses it could answer one before the role that
    serves it, so its block has permissions but no allow_responses."""
    tap = UserSpec("tap-tools", "_INBOX.tap-tools", Permissions(["mgrpo.r1.node.ping"], ["mgrpo.r1.>"]), "TOOLS", False)
    block = security_sections([tap], {"tap-tools": "h"}, None, False, 2.0, ["r1"])
    assert 'subscribe: { allow: ["mgrpo.r1.>"] }' in block and "allow_responses" not in block


def test_security_sections_tls_block_names_the_files_and_verify():
    """`tls {}` with cert, key, CA and timeout; `verify: true` only when clients are verified."""
    users = [UserSpec(ADMIN_USER, "_INBOX.admin", None)]
    files = {"cert": "/c/server.pem", "key": "/c/server-key.pem", "ca": "/c/ca.pem"}
    plain = security_sections(users, {ADMIN_USER: "h"}, files, False, 2.5, ["r1"])
    assert plain.startswith(
        'tls {\n  cert_file: "/c/server.pem"\n  key_file: "/c/server-key.pem"\n  ca_file: "/c/ca.pem"\n'
        "  timeout: 2.5\n  handshake_first: true\n}"
    )
    assert "verify" not in plain
    assert "  timeout: 2.5\n  verify: true\n  handshake_first: true\n}" in security_sections(
        users, {ADMIN_USER: "h"}, files, True, 2.5, ["r1"]
    )


@pytest.mark.parametrize("perms", [Permissions([], ["x"]), Permissions(["x"], []), Permissions()])
def test_user_block_refuses_an_empty_allow_list(perms):
    """nats-server reads an empty allow list as "everything": refused rather than rendered."""
    with pytest.raises(ValueError, match="empty allow list"):
        _user_block(UserSpec("r", "_INBOX.r", perms), "$2b$10$h")


# ---- render_deployment ------------------------------------------------------------------------------

# + admin and tap of 4 accounts: 10 bcrypt hashes a render
_FEW = {name: ACCESSES[name] for name in ("main-learner", "tool")}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("deploy") / "out"
    description = DeploymentDescription(run_ids=["r1"], tls=TlsSettings(enabled=False))
    return description, out, render_deployment(description, _FEW, out)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_render_writes_a_private_password_file_per_user(rendered):
    """One password file per user, mode 0600, a single non-empty line."""
    _, out, result = rendered
    assert list(result.password_files) == ["main-learner", "tool", *PER_ACCOUNT]
    for path in result.password_files.values():
        assert path.parent == out / "secrets" and _mode(path) == 0o600
        lines = path.read_text().splitlines()
        assert len(lines) == 1 and len(lines[0]) >= 24
    assert len({p.read_text() for p in result.password_files.values()}) == 10  # all different


def test_the_server_config_holds_bcrypt_hashes_and_never_a_password(rendered):
    """Passwords reach the server only as `$2b$` hashes; no TLS section when TLS is off."""
    _, _, result = rendered
    conf = result.server_configs["nats-1"].read_text()
    assert conf.count('password: "$2b$10$') == 10
    for path in result.password_files.values():
        assert path.read_text().strip() not in conf
    assert "tls {" not in conf and "cluster {" not in conf
    # the 2 roles' users answer; the 4 admins (unrestricted) and the 4 tap users (they see every request) do not
    assert result.security in conf and conf.count('allow_responses: { max: 1, expires: "3600s" }') == 2
    assert (out_accounts := (result.server_configs["nats-1"].parent / "accounts.conf").read_text()).startswith(
        "accounts {"
    ) and "tls" not in out_accounts


def test_node_configs_carry_user_inbox_and_password_file(rendered):
    """Each user's `nats` section: plain URL, its user, `_INBOX.<user>`, password file in the secrets dir."""
    _, out, result = rendered
    for user, path in result.node_configs.items():
        nats = yaml.safe_load(path.read_text())["nats"]
        assert nats == {
            "url": "nats://127.0.0.1:4222",
            "auth": {
                "user": user,
                "password_file": str(out.resolve() / "secrets" / f"{user}.password"),
                "inbox_prefix": f"_INBOX.{user}",
            },
        }
        assert Path(nats["auth"]["password_file"]).read_text() == result.password_files[user].read_text()


def test_re_rendering_keeps_the_passwords_and_salts_new_hashes(rendered):
    """A second render reads the existing password files: same contents, new bcrypt salts."""
    description, out, first = rendered
    passwords = {u: p.read_text() for u, p in first.password_files.items()}
    old_conf = first.server_configs["nats-1"].read_text()
    second = render_deployment(description, _FEW, out)
    assert {u: p.read_text() for u, p in second.password_files.items()} == passwords
    assert second.server_configs["nats-1"].read_text() != old_conf  # salted again
    old_hashes = {line for line in old_conf.splitlines() if "$2b$" in line}
    assert not old_hashes & {line for line in second.security.splitlines() if "$2b$" in line}


def test_render_with_tls_needs_the_certificates_first(tmp_path):
    """TLS on and no certs/ca.pem: FileNotFoundError telling to run `mgrpo deploy certs`, nothing hashed."""
    with pytest.raises(FileNotFoundError, match="mgrpo deploy certs"):
        render_deployment(DeploymentDescription(), _FEW, tmp_path / "out")


def test_render_a_tls_cluster_for_an_install_dir(tmp_path):
    """3 servers, TLS, install_dir: each config routes to the two others over verified TLS, and every
    path inside the rendered files points into the install dir (no local certs needed)."""
    description = from_dict(
        DeploymentDescription, {"servers": [{"name": f"n{i}", "host": f"h{i}"} for i in (1, 2, 3)], "run_ids": ["r1"]}
    )
    result = render_deployment(description, {"tool": ACCESSES["tool"]}, tmp_path / "out", install_dir="/opt/mgrpo")
    assert list(result.server_configs) == ["n1", "n2", "n3"]
    n2 = result.server_configs["n2"].read_text()
    assert 'routes: ["nats-route://h1:6222", "nats-route://h3:6222"]' in n2 and 'server_name: "n2"' in n2
    assert 'cert_file: "/opt/mgrpo/certs/server.pem"' in n2 and "verify: true" in n2  # the routes' TLS
    nats = yaml.safe_load(result.node_configs["tool"].read_text())["nats"]
    assert nats["url"] == "tls://h1:4222,tls://h2:4222,tls://h3:4222"
    assert (
        nats["tls"] == {"ca_file": "/opt/mgrpo/certs/ca.pem"}
        and nats["auth"]["password_file"] == "/opt/mgrpo/secrets/tool.password"
    )
    assert _mode(result.password_files["tool"]) == 0o600


@pytest.mark.parametrize("content", ["", "  \n"])
def test_render_with_an_empty_existing_password_file_is_a_clear_error(tmp_path, content):
    """A truncated password file must not crash with an IndexError nor be hashed as an empty password."""
    out = tmp_path / "out"
    (out / "secrets").mkdir(parents=True)
    (out / "secrets" / "tool.password").write_text(content)
    # Found by this test: an empty file used to raise IndexError, a blank one was hashed as "".
    with pytest.raises(ValueError, match="tool.password"):
        render_deployment(DeploymentDescription(tls=TlsSettings(enabled=False)), {"tool": ACCESSES["tool"]}, out)
