"""The flags every command that builds a node config shares: `--config`, `--set`, and the agents'
model shortcuts `--main` / `--sub`, which stand for `--set agents.<side>.model=SPEC`; and those of the
commands that only connect (`tap`, `ping`): `--nats` and a `--config` whose `nats` section says who
they connect as (user, password file or variable, TLS)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["DEFAULT_URL", "add_config_arguments", "add_connection_arguments", "connection", "model_overrides"]

DEFAULT_URL = "nats://127.0.0.1:4222"


def add_config_arguments(
    p: argparse.ArgumentParser, config_help: str, main_help: str, sub_help: str, set_help: str = "override a config key"
) -> None:
    """--config FILE, --set KEY=VALUE (repeatable, into `args.overrides`), --main SPEC, --sub SPEC."""
    p.add_argument("--config", metavar="FILE", help=config_help)
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE", help=set_help)
    p.add_argument("--main", metavar="SPEC", help=main_help)
    p.add_argument("--sub", metavar="SPEC", help=sub_help)


def model_overrides(args: Any) -> list[str]:
    """`agents.<side>.model=SPEC` for each of --main / --sub given (after --set, so they win)."""
    return [
        f"agents.{side}.model={spec}" for side, spec in (("main", args.main), ("sub", args.sub)) if spec is not None
    ]


def add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """--nats URL and --config FILE (its `nats` section: url, auth, tls)."""
    p.add_argument(
        "--nats",
        metavar="URL",
        help=f"NATS server URL(s), comma-separated (default: nats.url of --config, else {DEFAULT_URL})",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="a node config whose `nats` section (url; auth: user, password_file or password_env; tls) "
        "this command connects with",
    )


def connection(args: Any) -> tuple[str, Any, Any]:
    """(URL, ConnectSecurity or None, the NatsConfig read) from --nats / --config; ConfigError or
    ValueError when the config is wrong."""
    from mgrpo_actors.config import NatsConfig, load_config

    nats = load_config(NatsConfig, args.config, section="nats") if args.config else NatsConfig()
    url = args.nats or (nats.url if args.config else DEFAULT_URL)
    return url, nats.security(url), nats
