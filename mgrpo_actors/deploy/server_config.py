"""Render the NATS side of a deployment (`mgrpo deploy nats-config`): one nats-server configuration per
server (JetStream, TLS, the cluster's routes, and the accounts of deploy/accounts.py: MAIN, one per
sub-agent type (SUB, or SUB_<TYPE>), TOOLS, MONITOR, each with what crosses into and out of it, and in
each account one user per role living there with the subject permissions of its `RoleAccess`, an
`admin-<account>` user that provisions the run's streams and buckets of that account, and a read-only
tap user: `tap-main`, `tap-sub` (`tap-sub_<type>`), `tap-tools`, and `tap` in MONITOR, which sees every
account's metrics and events), a password file per user (random, mode 0600, kept when they exist so
re-rendering changes no password), and per user the `nats` section of its node config (URLs, user,
password file, inbox prefix, CA). Passwords reach the servers only as bcrypt hashes.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import yaml

from mgrpo_actors.deploy.access import Permissions, RoleAccess, permissions, replay_api
from mgrpo_actors.deploy.accounts import (
    ACCOUNT_NAME,
    DEFAULT_REPLY_WINDOW_S,
    AccountResources,
    account_resources,
    accounts_of,
    accounts_section,
)
from mgrpo_actors.deploy.description import DeploymentDescription
from protocols import DEFAULT_SUB_TYPE, Subjects

__all__ = [
    "TAP_USER",
    "RenderedDeployment",
    "UserSpec",
    "admin_user",
    "is_admin_user",
    "render_deployment",
    "security_sections",
    "tap_user",
    "user_specs",
]

TAP_USER = "tap"  # `mgrpo tap` in MONITOR: every account's metrics and events of the run, read-only


def admin_user(account: str) -> str:
    """The user that provisions `account`'s streams, KV and object stores; no subject limits in its
    account (keep it off the nodes)."""
    return f"admin-{account.lower()}"


def is_admin_user(user: str) -> bool:
    """Whether `user` is one that admin_user names: `admin-` and an account's name in lower case (of some run)."""
    account = user.removeprefix("admin-")
    return account != user and account == account.lower() and ACCOUNT_NAME.fullmatch(account.upper()) is not None


def tap_user(account: str) -> str:
    """The read-only user of `account` (`mgrpo tap` / `mgrpo ping` there): reads every subject and
    stream of the run in that account, publishes only pings."""
    return TAP_USER if account == "MONITOR" else f"tap-{account.lower()}"


@dataclass(frozen=True)
class UserSpec:
    """One NATS user: its name, account, inbox prefix and permissions (None = unrestricted in its account)."""

    name: str
    inbox_prefix: str
    permissions: Permissions | None
    account: str = "MAIN"
    # Whether it may answer requests it received (allow_responses): the roles' users do (tools, sub-agents, and
    # every node answers pings); a tap user reads everything, so it must never answer a request it sees.
    answers: bool = True


@dataclass(frozen=True)
class RenderedDeployment:
    """What `render_deployment` wrote."""

    server_configs: dict[str, Path]  # server name -> its nats-server configuration
    node_configs: dict[str, Path]  # user -> a node config holding its `nats` section
    password_files: dict[str, Path]  # user -> password file
    security: str  # the servers' `tls` and `authorization` sections (what tests append to their own server's config)


def _tap_permissions(run_ids: list[str], inbox_prefix: str, resources: AccountResources) -> Permissions:
    pub, sub = [], [f"{inbox_prefix}.>"]
    for run_id in run_ids:
        s = Subjects(run_id)
        sub.append(s.all)
        pub.append(s.node_ping)
        # `mgrpo tap --stream`: direct gets on its account's streams
        for stream in (s.stream(what) for what in resources.streams):
            pub += replay_api(stream)
    return Permissions(pub, sub)


def user_specs(description: DeploymentDescription, accesses: dict[str, RoleAccess]) -> list[UserSpec]:
    """A user per role (`accesses` by user: actors.roles.role_accesses of the description's sub-agent types, a role
    of the sub side once per type), then per account its admin and tap users; each allowed what its role needs in
    every run of the description."""
    accounts = accounts_of(tuple(description.sub_types))
    users = []
    for user, access in accesses.items():
        if access.account not in accounts:
            raise ValueError(f"role {user}: account {access.account!r} is not one of {', '.join(accounts)}")
        prefix = f"_INBOX.{user}"
        merged = Permissions()
        for run_id in description.run_ids:
            merged = merged.merged(permissions(access, run_id, prefix))
        users.append(UserSpec(user, prefix, merged, access.account))
    for account in accounts:
        admin, tap = admin_user(account), tap_user(account)
        users.append(UserSpec(admin, f"_INBOX.{admin}", None, account))
        users.append(
            UserSpec(
                tap,
                f"_INBOX.{tap}",
                _tap_permissions(description.run_ids, f"_INBOX.{tap}", account_resources(accesses, account)),
                account,
                answers=False,
            )
        )
    return users


def _password(path: Path) -> str:
    """The user's password: that of its existing file (kept, so re-rendering changes no password), else a new random
    one."""
    if path.exists():
        os.chmod(path, 0o600)  # also when the file was left with wider permissions
        lines = path.read_text(encoding="utf-8").splitlines()
        if not lines or not lines[0].strip():
            raise ValueError(f"{path} is empty: delete it to get a new password, or write one on its first line")
        return lines[0].strip()
    password = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(password + "\n")
    return password


def _user_block(user: UserSpec, password_hash: str, reply_window_s: float = DEFAULT_REPLY_WINDOW_S) -> str:
    lines = [f"    {{ user: {json.dumps(user.name)}, password: {json.dumps(password_hash)}"]
    if user.permissions is not None:
        perms = user.permissions
        if not perms.publish or not perms.subscribe:  # nats-server reads an empty allow list as "everything"
            raise ValueError(f"user {user.name}: an empty allow list would allow every subject")
        lines.append("      permissions: {")
        lines.append(f"        publish: {{ allow: {json.dumps(perms.publish)} }}")
        lines.append(f"        subscribe: {{ allow: {json.dumps(perms.subscribe)} }}")
        # Replies to requests this user received (tool results, subtask results, pings, Failures): only
        # to the reply subject of such a request, once, within the reply window (a subtask may take
        # minutes; the server's default is 2), so a role cannot write into others' inboxes. A user that
        # does not answer (a tap) gets none: it sees every request and could otherwise answer first.
        if user.answers:
            lines.append(f"        allow_responses: {{ max: 1, expires: {json.dumps(f'{reply_window_s:g}s')} }}")
        lines.append("      }")
    lines.append("    }")
    return "\n".join(lines)


def security_sections(
    users: list[UserSpec],
    hashes: dict[str, str],
    tls_files: dict[str, str] | None,
    verify_clients: bool,
    tls_timeout_s: float,
    run_ids: list[str],
    reply_window_s: float = DEFAULT_REPLY_WINDOW_S,
    sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,),
) -> str:
    """The `accounts` (and `tls`) sections of a server configuration (exports and imports for `run_ids`, whose
    sub-agent types are `sub_types`)."""
    parts = []
    if tls_files is not None:
        verify = "\n  verify: true" if verify_clients else ""
        parts.append(
            f"tls {{\n  cert_file: {json.dumps(tls_files['cert'])}\n  key_file: {json.dumps(tls_files['key'])}\n"
            f"  ca_file: {json.dumps(tls_files['ca'])}\n  timeout: {tls_timeout_s:g}{verify}\n"
            # Clients start TLS before anything else (nats.tls.handshake_first):
            # no credentials to a plain-text impostor.
            "  handshake_first: true\n}"
        )
    accounts = accounts_of(sub_types)
    strays = [u.name for u in users if u.account not in accounts]
    if strays:
        raise ValueError(f"users {', '.join(strays)} live in no account of sub-agent types {', '.join(sub_types)}")
    by_account = {
        account: [_user_block(u, hashes[u.name], reply_window_s) for u in users if u.account == account]
        for account in accounts
    }
    parts.append(accounts_section(by_account, run_ids, reply_window_s, sub_types))
    return "\n".join(parts) + "\n"


def _server_config(
    description: DeploymentDescription, index: int, security: str, tls_files: dict[str, str] | None
) -> str:
    server = description.servers[index]
    lines = [
        "# Rendered by `mgrpo deploy nats-config` from the deployment description: edit that, not this.",
        f"server_name: {json.dumps(server.name)}",
        f"listen: {json.dumps(server.listen(server.client_port))}",
        f"http: {json.dumps(f'127.0.0.1:{server.monitor_port}')}",
        f"max_payload: {description.max_payload}",
        'write_deadline: "10s"',
        (
            f"jetstream {{ store_dir: {json.dumps(description.jetstream.store_dir)}, "
            f"max_file_store: {json.dumps(description.jetstream.max_file_store)} }}"
        ),
    ]
    if len(description.servers) > 1:
        routes = [f"nats-route://{s.host}:{s.cluster_port}" for i, s in enumerate(description.servers) if i != index]
        tls = ""
        if tls_files is not None:
            tls = (
                f"\n  tls {{ cert_file: {json.dumps(tls_files['cert'])}, key_file: {json.dumps(tls_files['key'])}, "
                f"ca_file: {json.dumps(tls_files['ca'])}, verify: true, timeout: {description.tls.timeout_s:g} }}"
            )
        lines.append(
            f"cluster {{\n  name: {json.dumps(description.cluster_name)}\n"
            f"  listen: {json.dumps(server.listen(server.cluster_port))}\n  routes: {json.dumps(routes)}{tls}\n}}"
        )
    return "\n".join(lines) + "\n" + security


def render_deployment(
    description: DeploymentDescription, accesses: dict[str, RoleAccess], out: Path, install_dir: str = ""
) -> RenderedDeployment:
    """Write the server configurations, password files and node `nats` sections into `out`.

    install_dir: where `out` will be on the servers and nodes ("" = `out` itself, one machine); the
    paths inside the rendered files point there.
    """
    out.mkdir(parents=True, exist_ok=True)
    secrets_dir = out / description.secrets_dir
    secrets_dir.mkdir(parents=True, exist_ok=True)
    (out / "nodes").mkdir(exist_ok=True)
    home = Path(install_dir) if install_dir else out.resolve()
    certs = home / description.tls.certs_dir
    if description.tls.enabled and not install_dir and not (out / description.tls.certs_dir / "ca.pem").exists():
        raise FileNotFoundError(
            f"{out / description.tls.certs_dir / 'ca.pem'} is missing: "
            "run `mgrpo deploy certs` first (or set tls.enabled: false)"
        )
    tls_files = (
        {"cert": str(certs / "server.pem"), "key": str(certs / "server-key.pem"), "ca": str(certs / "ca.pem")}
        if description.tls.enabled
        else None
    )
    users = user_specs(description, accesses)
    password_files = {u.name: secrets_dir / f"{u.name}.password" for u in users}
    hashes = {
        u.name: bcrypt.hashpw(_password(password_files[u.name]).encode(), bcrypt.gensalt(rounds=10)).decode()
        for u in users
    }
    security = security_sections(
        users,
        hashes,
        tls_files,
        description.tls.verify_clients,
        description.tls.timeout_s,
        description.run_ids,
        description.reply_window_s,
        tuple(description.sub_types),
    )
    # The accounts alone, for servers configured elsewhere (the NATS Helm chart includes it:
    # deploy/k8s/nats/values.yaml).
    (out / "accounts.conf").write_text(
        security_sections(
            users,
            hashes,
            None,
            False,
            description.tls.timeout_s,
            description.run_ids,
            description.reply_window_s,
            tuple(description.sub_types),
        )
    )
    server_configs = {}
    for i, server in enumerate(description.servers):
        server_configs[server.name] = out / f"{server.name}.conf"
        server_configs[server.name].write_text(_server_config(description, i, security, tls_files))
    node_configs = {}
    for user in users:
        nats: dict = {
            "url": description.urls(),
            "auth": {
                "user": user.name,
                "password_file": str(home / description.secrets_dir / f"{user.name}.password"),
                "inbox_prefix": user.inbox_prefix,
            },
        }
        if description.tls.enabled:
            nats["tls"] = {"ca_file": str(certs / "ca.pem")}
        if description.jetstream.replicas > 1:
            # what the admin provisions with (and a node recreates with)
            nats["replicas"] = description.jetstream.replicas
        node_configs[user.name] = out / "nodes" / f"{user.name}.yaml"
        header = (
            f"# The `nats` section of {user.name}, a user of account {user.account} "
            "(rendered by `mgrpo deploy nats-config`); merge it into the config of a node that runs as it.\n"
        )
        node_configs[user.name].write_text(header + yaml.safe_dump({"nats": nats}, sort_keys=False))
    return RenderedDeployment(server_configs, node_configs, password_files, security)
