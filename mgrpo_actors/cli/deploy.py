"""`mgrpo deploy`: what running across servers securely needs, made from the role table.

    mgrpo deploy certs --out deploy/nats/generated/certs --host nats-1.example --host 10.0.0.5
    mgrpo deploy nats-config --description deploy/nats/deployment.yaml --out deploy/nats/generated
    mgrpo deploy provision --config deploy/nats/generated/nodes/admin-main.yaml --run-id r1
                           # and admin-sub, admin-tools, admin-monitor
    mgrpo deploy provision --config deploy/configs/two-subs.yaml \
                           --config deploy/nats/generated/nodes/admin-sub_searcher.yaml --run-id two-subs
                           # a run with sub-agent types: its config first, so the types are known

`certs`: a development CA, a server certificate for the given hosts, client certificates on request.
`nats-config`: one nats-server configuration per server (JetStream, TLS, cluster routes, the accounts
MAIN, one per sub-agent type of the description's `sub_types` (SUB, or SUB_<TYPE>), TOOLS and MONITOR with
what crosses between them, in each a user per role of that account with the subject permissions of that
role's access in actors/roles.py (a sub side's role once per type: `<type>-agent`, `<type>-aligner`,
`<type>-learner`), an `admin-<account>` and a read-only tap user), a password file per user, and per user
the `nats` section of its node config.
`provision`: the run's streams, KV buckets and object stores of one account, made as that account's
admin before any node starts (no role may create them). Lives here, above mgrpo_actors, because it
reads the role table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mgrpo_actors.cli.composition import composition_of
from protocols import DEFAULT_SUB_TYPE

__all__ = ["add_parser"]


def _certs(args: argparse.Namespace) -> int:
    from mgrpo_actors.deploy.certs import make_certificates

    written = make_certificates(Path(args.out), args.host, args.client, days=args.days)
    print(
        f"CA {written.ca} (its key {written.ca_key}: keep it off the servers), "
        f"server certificate {written.server} for {', '.join(args.host)}"
    )
    for name, (cert, _key) in written.clients.items():
        print(f"client {name}: {cert}")
    return 0


def _nats_config(args: argparse.Namespace) -> int:
    from mgrpo_actors.config import load_config
    from mgrpo_actors.deploy.description import DeploymentDescription
    from mgrpo_actors.deploy.server_config import render_deployment

    description = load_config(DeploymentDescription, args.description)
    accesses = dict(composition_of(args).role_accesses(tuple(description.sub_types)))
    rendered = render_deployment(description, accesses, Path(args.out), install_dir=args.install_dir)
    for name, path in rendered.server_configs.items():
        print(f"server {name}: {path}   (nats-server -c {path})")
    print(
        f"users: {', '.join(rendered.password_files)}; passwords in {Path(args.out) / description.secrets_dir} "
        f"(mode 0600), node `nats` sections in {Path(args.out) / 'nodes'}"
    )
    return 0


def _account(args: argparse.Namespace, user: str, sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)) -> str | None:
    """--account, else the account of an `admin-<account>` user, else None (everything: a server without accounts);
    the accounts are those of a run with the sub-agent types `sub_types`."""
    from mgrpo_actors.deploy.accounts import accounts_of
    from mgrpo_actors.deploy.server_config import admin_user

    accounts = accounts_of(sub_types)
    if args.account == "auto":
        return next((account for account in accounts if user == admin_user(account)), None)
    if args.account not in accounts:
        raise ValueError(
            f"--account {args.account}: the run's accounts are {', '.join(accounts)} (its sub-agent types come from "
            "--config: give the run's config too)"
        )
    return args.account


def _provision(args: argparse.Namespace) -> int:
    from mgrpo_actors.cli.arguments import connection
    from mgrpo_actors.config import NodeConfig, load_config
    from mgrpo_actors.deploy.accounts import account_resources
    from mgrpo_actors.deploy.provision import provision_run
    from mgrpo_actors.deploy.server_config import is_admin_user
    from mgrpo_actors.runtime import Bus, BusError

    url, security, nats = connection(args)
    config = load_config(NodeConfig, args.config)
    pipeline, sub_types = config.pipeline, config.sub_types  # the durables' ack wait; the run's sides (agents.subs)
    account = _account(args, nats.auth.user, sub_types)
    if account is None and args.account == "auto" and is_admin_user(nats.auth.user):
        raise ValueError(
            f"user {nats.auth.user} is the admin of no account of this run (sub-agent types {', '.join(sub_types)}): "
            "give the run's config too (--config RUN.yaml --config ADMIN.yaml: its agents.subs name the types), "
            "or --account"
        )
    resources = account_resources(dict(composition_of(args).role_accesses(sub_types)), account) if account else None
    try:
        with Bus(
            url,
            run_id=args.run_id,
            node="mgrpo-deploy-provision",
            sub_types=sub_types,
            connect_timeout_s=nats.connect_timeout_s,
            max_bytes=nats.max_message_bytes,
            security=security,
        ) as bus:
            made = provision_run(bus, nats.stream_limits, pipeline.ack_wait_s, resources)
    except BusError as exc:  # unreachable, refused credentials or TLS
        print(f"mgrpo deploy provision: error: {exc}", file=sys.stderr)
        return 3
    except (
        Exception
    ) as exc:  # a JetStream API call that timed out even after retries: usually a user that may not make streams
        print(
            f"mgrpo deploy provision: error: {type(exc).__name__}: {exc} "
            "(is --config an admin's `nats` section, nodes/admin-<account>.yaml?)",
            file=sys.stderr,
        )
        return 3
    where = f"account {account}" if account else "every stream and bucket (no account named)"
    print(
        f"run {args.run_id} (sub-agent types {', '.join(sub_types)}), {where}: {len(made['streams'])} streams, "
        f"KV {', '.join(made['kv']) or '-'}, "
        f"object stores {', '.join(made['objects']) or '-'}, durables {', '.join(made['durables']) or '-'} "
        f"(replicas {nats.replicas}, ack wait {pipeline.ack_wait_s:g} s)"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    try:
        return {"certs": _certs, "nats-config": _nats_config, "provision": _provision}[args.what](args)
    except (ValueError, FileNotFoundError) as exc:  # ConfigError is a ValueError
        print(f"mgrpo deploy {args.what}: error: {exc}", file=sys.stderr)
        return 2


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "deploy",
        help="certificates, NATS server configs with per-role users, provisioning",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = p.add_subparsers(dest="what", required=True, metavar="{certs,nats-config,provision}")
    certs = what.add_parser("certs", help="a development CA and certificates")
    certs.add_argument("--out", required=True, metavar="DIR", help="where ca.pem, server.pem, … go")
    certs.add_argument(
        "--host",
        action="append",
        required=True,
        metavar="HOST",
        help="a name or IP the servers are reached at (repeat)",
    )
    certs.add_argument(
        "--client", action="append", default=[], metavar="NAME", help="also a client certificate NAME.pem (repeat)"
    )
    certs.add_argument("--days", type=float, default=365.0, metavar="N", help="validity (default 365)")
    config = what.add_parser("nats-config", help="nats-server configs, users, passwords, node nats sections")
    config.add_argument(
        "--description",
        default="deploy/nats/deployment.yaml",
        metavar="FILE",
        help="the deployment (default: deploy/nats/deployment.yaml)",
    )
    config.add_argument(
        "--out", default="deploy/nats/generated", metavar="DIR", help="where to write (default: deploy/nats/generated)"
    )
    config.add_argument(
        "--install-dir",
        default="",
        metavar="PATH",
        help="where DIR will be on the servers and nodes (default: DIR itself)",
    )
    provision = what.add_parser("provision", help="make a run's streams and buckets of one account as its admin user")
    provision.add_argument(
        "--config",
        required=True,
        action="append",
        metavar="FILE",
        help="the admin's node config (nodes/admin-main.yaml, …); repeat to merge the run's config first "
        "(its sub-agent types, pipeline.ack_wait_s and nats limits), later files winning",
    )
    provision.add_argument(
        "--account",
        default="auto",
        metavar="ACCOUNT",
        help="whose streams and buckets: MAIN, SUB (or SUB_<TYPE> for a sub-agent type), TOOLS or MONITOR "
        "(default: the account of an admin-<account> user; else every one, for a server without accounts)",
    )
    provision.add_argument("--nats", metavar="URL", help="server URL(s) (default: nats.url of --config)")
    provision.add_argument("--run-id", required=True, metavar="ID", help="the run to provision")
    for sub in (certs, config, provision):
        sub.set_defaults(func=_run)
