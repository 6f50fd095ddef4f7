"""`mgrpo ping`: list the nodes of a run (each answers with roles, versions, uptime, dead letters). Without
--nats, --config and --run-dir, a run of this machine's `mgrpo run` (runs/<run id>/nats-credentials.json) is
reached on its embedded server as its user."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mgrpo_actors.cli.arguments import add_connection_arguments, connection
from mgrpo_actors.runtime.connect import connect_client
from protocols import NodeInfo, NodePing, ProtocolError, Subjects, decode, encode, validate_run_id

__all__ = ["add_parser", "ping_nodes"]


async def ping_nodes(url: str, run_id: str, wait_s: float = 1.0, security: Any = None) -> list[NodeInfo]:
    """Every NodeInfo that arrives within `wait_s` of one ping (connecting with `security`, if any)."""
    nc = await connect_client(url, "mgrpo-ping", security=security)
    infos: list[NodeInfo] = []
    try:
        inbox = nc.new_inbox()

        async def on_reply(msg: Any) -> None:
            try:
                reply = decode(msg.data)
            except ProtocolError:
                return
            if isinstance(reply, NodeInfo):
                infos.append(reply)

        await nc.subscribe(inbox, cb=on_reply)
        await nc.publish(Subjects(run_id).node_ping, encode(NodePing(requester="mgrpo ping")), reply=inbox)
        await asyncio.sleep(wait_s)
    finally:
        await nc.close()
    return sorted(infos, key=lambda i: i.node)


def _run(args: Any) -> int:
    try:
        validate_run_id(args.run_id)
        url, security, _ = connection(args, run_id=args.run_id)
    except ValueError as exc:  # a bad run id, --config, password file or certificate
        print(f"mgrpo ping: error: {exc}", file=sys.stderr)
        return 2
    try:
        infos = asyncio.run(ping_nodes(url, args.run_id, args.wait, security))
    except Exception as exc:  # BusConnectError names the URL; anything else is shown with its type
        print(f"mgrpo ping: error: {exc if 'NATS' in str(exc) else f'{type(exc).__name__}: {exc}'}", file=sys.stderr)
        return 3
    for info in infos:
        print(
            json.dumps(
                {
                    "node": info.node,
                    "roles": info.roles,
                    "uptime_s": round(info.uptime_s, 1),
                    "pid": info.pid,
                    "host": info.host,
                    "dead_letters": info.dead_letters,
                    "versions": info.versions,
                }
            )
        )
    if not infos:
        print(f"mgrpo ping: no node of run {args.run_id!r} answered within {args.wait:g} s", file=sys.stderr)
        return 1
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("ping", help="list the nodes of a run", description=__doc__)
    add_connection_arguments(p)
    p.add_argument("--run-id", default="default", metavar="ID", help="run id")
    p.add_argument("--wait", type=float, default=1.0, metavar="S", help="how long to collect answers")
    p.set_defaults(func=_run)
