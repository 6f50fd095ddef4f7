"""The flags every command that builds a node config shares: `--config`, `--set`, and the agents'
model shortcuts `--main` / `--sub`, which stand for `--set agents.<side>.model=SPEC`; and those of the
commands that only connect (`tap`, `ping`): `--nats`, a `--config` whose `nats` section says who
they connect as (user, password file or variable, TLS), and `--run-dir`, the directory of a run on
its embedded server, whose credentials file names that server and its user."""

from __future__ import annotations

import argparse
from pathlib import Path
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
    """--nats URL, --config FILE (its `nats` section: url, auth, tls) and --run-dir DIR."""
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
    p.add_argument(
        "--run-dir",
        metavar="DIR",
        help="a run on its embedded server (mgrpo run, mgrpo-node --role all): its directory <run.dir>/<run.id>, "
        "whose nats-credentials.json gives the server's URL (unless --nats) and the run's user",
    )


def connection(args: Any, run_id: str | None = None) -> tuple[str, Any, Any]:
    """(URL, ConnectSecurity or None, the NatsConfig read) from --nats / --config / --run-dir; ConfigError
    or ValueError when the config is wrong. `run_id` (`mgrpo ping`'s): without any of the three flags, the
    run's directory under the default run.dir is --run-dir when it holds credentials (a local `mgrpo run`)."""
    from mgrpo_actors.config import NatsConfig, RunConfig, load_config
    from mgrpo_actors.runtime.run_credentials import credentials_path

    nats = load_config(NatsConfig, args.config, section="nats") if args.config else NatsConfig()
    run_dir = getattr(args, "run_dir", None)
    if run_id and not (run_dir or args.nats or args.config):
        local = Path(RunConfig().dir) / run_id
        run_dir = str(local) if credentials_path(local).exists() else None
    if run_dir:
        return (*_embedded_run(run_dir, args.nats, nats.auth.user), nats)
    url = args.nats or (nats.url if args.config else DEFAULT_URL)
    return url, nats.security(url), nats


def _embedded_run(run_dir: str, url: str | None, config_user: str) -> tuple[str, Any]:
    """(URL, ConnectSecurity) of the run in `run_dir` on its embedded server (RunCredentialsError, a
    ValueError, when its credentials file is missing or not to be trusted)."""
    from mgrpo_actors.runtime.run_credentials import credentials_path, load_run_credentials

    if config_user:
        raise ValueError("--run-dir connects as the run's own user: give it or a --config with nats.auth, not both")
    path = credentials_path(Path(run_dir))
    credentials = load_run_credentials(path)
    if not (url or credentials.url):
        raise ValueError(f"{path} names no server URL yet (its server has not started): give --nats")
    return url or credentials.url, credentials.security()
