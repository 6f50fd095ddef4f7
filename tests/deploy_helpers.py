"""What the deployment tests share: render a loopback deployment with `mgrpo deploy certs` and
`mgrpo deploy nats-config`, start a nats-server with its TLS and users, and connect as one of its users."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from mgrpo_actors.runtime import EmbeddedNats
from tests.helpers import run_script

__all__ = ["node_config", "render", "secure_server", "user_nats", "user_security"]


def render(tmp: Path, run_id: str, **settings: object) -> Path:
    """certs + nats-config for one loopback server and `run_id` (and description `settings`); returns the output
    directory."""
    out = tmp / "deploy"
    description = tmp / "deployment.yaml"
    description.write_text(
        yaml.safe_dump(
            {
                "servers": [{"name": "n1", "host": "127.0.0.1"}],
                "run_ids": [run_id],
                "jetstream": {"store_dir": str(tmp / "js")},
                **settings,
            }
        )
    )
    for args in (
        ["certs", "--out", str(out / "certs"), "--host", "127.0.0.1", "--host", "localhost"],
        ["nats-config", "--description", str(description), "--out", str(out)],
    ):
        done = run_script("mgrpo", "deploy", *args, timeout_s=60)
        assert done.returncode == 0, done.stderr
    return out


def secure_server(out: Path) -> EmbeddedNats:
    """A started nats-server with the rendered `tls` and `authorization` sections (its own port and store)."""
    security = re.search(r"(tls \{.*)", (out / "n1.conf").read_text(), re.S).group(1)
    return EmbeddedNats(extra_config=security).start()


def user_nats(out: Path, user: str) -> dict:
    """`user`'s rendered `nats` section, without the URL (tests pass their server's with --nats)."""
    nats = yaml.safe_load((out / "nodes" / f"{user}.yaml").read_text())["nats"]
    nats.pop("url")
    return nats


def user_security(out: Path, user: str, url: str):  # noqa: ANN201
    """ConnectSecurity of `user` for `url`."""
    from mgrpo_actors.config.nats_security import NatsAuthConfig, NatsTlsConfig, connect_security

    nats = user_nats(out, user)
    return connect_security(url, NatsAuthConfig(**nats["auth"]), NatsTlsConfig(**nats.get("tls", {})))


def node_config(tmp: Path, out: Path, user: str, base: dict) -> Path:
    """A node config: `base` with `user`'s rendered `nats` section."""
    path = tmp / f"{user}.yaml"
    path.write_text(yaml.safe_dump({**base, "nats": {**base.get("nats", {}), **user_nats(out, user)}}))
    return path
