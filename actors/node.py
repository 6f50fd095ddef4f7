"""`mgrpo-node`: the composition root. Starts the actors of the requested roles on one bus.

    mgrpo-node --role tool --config deploy/configs/default.yaml --nats nats://host:4222 --run-id r1
    mgrpo-node --role all            # every role but the monitor in one process, on an embedded nats-server,
                                     # until the run is finished
    torchrun --nproc-per-node 2 -m actors.node --role sub-learner --config FILE --nats URL --run-id r1

A learner may run as several ranks under a launcher (torchrun, deepspeed; WORLD_SIZE > 1), one learner
role per node: rank 0 is the node on NATS (batches, weights, KV, acks); ranks > 0 never connect to
NATS and follow rank 0 (mgrpo_actors/learner/ranks.py), so no gradient leaves the learner's ranks.

Exit codes: 0 after a graceful stop (SIGINT/SIGTERM or --duration), 2 for a bad command line or
config, 3 when NATS cannot be reached (at start, without JetStream, or lost for good later), when the
controller's watchdog stopped a stalled run or when the server's JetStream store is full (runtime/store_full.py),
1 when a role fails to start for another reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from actors.node_checks import follower_side, preflight
from actors.node_info import NodeInfoActor
from actors.roles import ROLES, expand_roles, node_streams, node_sub_types
from mgrpo_actors.config import ConfigError, NodeConfig, load_node_config, to_dict
from mgrpo_actors.config.pipeline import timeout_warnings
from mgrpo_actors.log import configure_logging, get_logger
from mgrpo_actors.monitoring.publish import MONITOR_REPORTED, RUN_FINISHED
from mgrpo_actors.runtime import Bus, BusConnectError, BusError, EmbeddedNats, ShutdownSignal
from mgrpo_actors.runtime.compute import start_compute_thread
from mgrpo_actors.runtime.disk import DiskFullError
from mgrpo_actors.runtime.health import HealthFile
from mgrpo_actors.runtime.redeliver import redeliver_unacked
from mgrpo_actors.runtime.run_credentials import matching_run_credentials
from mgrpo_actors.runtime.run_server import start_run_server
from mgrpo_actors.runtime.security import ConnectSecurity
from mgrpo_actors.runtime.shutdown import wait_for_stop
from mgrpo_actors.versions import package_versions
from protocols import Event, ProtocolError, decode

__all__ = ["build_parser", "follower_side", "main", "preflight", "start_roles", "stop_actors"]

EXIT_USAGE = 2
EXIT_NATS = 3
EXIT_FAILED = 1


def build_parser() -> argparse.ArgumentParser:
    roles_help = "\n".join(f"  {name:<13} {spec.summary}" for name, spec in ROLES.items())
    parser = argparse.ArgumentParser(
        prog="mgrpo-node",
        description="Start the actors of one or more roles of an M-GRPO run on a NATS bus.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"roles:\n{roles_help}\n  all           every role but the monitor in one process "
        "(embedded NATS unless --nats), until the run is finished",
    )
    parser.add_argument(
        "--role", action="append", default=[], metavar="ROLE", help="role to run; repeat for several (see below)"
    )
    parser.add_argument(
        "--config",
        action="append",
        metavar="FILE",
        help="YAML config file (defaults apply to keys it leaves out); repeat to merge several, later ones winning "
        "(e.g. the run's config, then the role's rendered nats section)",
    )
    parser.add_argument(
        "--sub-type",
        action="append",
        default=[],
        metavar="TYPE",
        dest="sub_types",
        help="the sub-agent type this node's sub-agent, sub-aligner and sub-learner roles serve (agents.subs); "
        "repeat for several (default: every type of the config)",
    )
    parser.add_argument("--nats", metavar="URL", help="NATS server URL (overrides nats.url)")
    parser.add_argument("--run-id", metavar="ID", help="run id (overrides run.id)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a config key, e.g. --set tools.actors_per_tool=4",
    )
    parser.add_argument("--name", help="node name in logs and pings (default: host-pid)")
    parser.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="stop gracefully after S seconds (default: run until SIGINT/SIGTERM)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="with --role all on the embedded server: continue the run in <run.dir>/<run.id> "
        "(its NATS store, checkpoints, its server's user in nats-credentials.json) instead of starting it afresh",
    )
    parser.add_argument(
        "--until-finished",
        action="store_true",
        help="stop gracefully once the controller reports the run finished (the default with --role all); "
        "with --role monitor: once the monitor has shown it and written its report",
    )
    parser.add_argument(
        "--health-file",
        metavar="PATH",
        help="while the node runs and is connected, write the time into PATH every 5 s (removed on stop): "
        "for liveness/readiness probes",
    )
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    parser.add_argument("--version", action="store_true", help="print versions and exit")
    return parser


def _fail(message: str, code: int) -> int:
    print(f"mgrpo-node: error: {message}", file=sys.stderr)
    return code


def _resolve_config(args: argparse.Namespace) -> NodeConfig:
    config = load_node_config(args.config, list(args.overrides), "mgrpo-node")
    # --run-id and --nats are plain strings (not YAML like --set values: `--run-id 123` stays "123").
    try:
        if args.run_id is not None:
            config = dataclasses.replace(config, run=dataclasses.replace(config.run, id=args.run_id))
        if args.nats is not None:
            config = dataclasses.replace(config, nats=dataclasses.replace(config.nats, url=args.nats))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return config


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.version:
        print(yaml.safe_dump(package_versions(), sort_keys=False), end="")
        return 0
    try:
        config = _resolve_config(args)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    if args.print_config:
        print(yaml.safe_dump(to_dict(config), sort_keys=False), end="")
        return 0
    if not args.role:
        return _fail(f"give at least one --role; valid roles: {', '.join([*ROLES, 'all'])}", EXIT_USAGE)
    try:
        roles = expand_roles(args.role, config)
        sub_types = node_sub_types(config, args.sub_types, roles)
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    try:
        preflight(config, roles, sub_types)
        follows = follower_side(roles, sub_types)
    except (ConfigError, ValueError) as exc:
        return _fail(str(exc), EXIT_USAGE)
    name = args.name or f"{socket.gethostname()}-{os.getpid()}"
    configure_logging(
        run_id=config.run.id, node=name, role=",".join(roles), level=config.log.level, json_output=config.log.json
    )
    if config.warmup.steps > 0:  # the supervised warm start (stage 0): built once per machine into the model cache
        from mgrpo_actors.warmup.cached import resolve_warm_start  # torch and transformers: imported on use

        config, _ = resolve_warm_start(config, get_logger("mgrpo.node").info)
    if len(config.sides) > 1:  # M waits for sub-agent episodes: its timeouts must leave the longest type's room
        sub_turns = max(config.agent(sub_type).max_turns for sub_type in config.sides[1:])
        for warning in timeout_warnings(config.pipeline, config.agents.main.max_turns, sub_turns):
            get_logger("mgrpo.node").warning(warning)
    if follows is not None:  # rank > 0 of a learner: no NATS, rank 0 leads
        from mgrpo_actors.learner.ranks import run_follower  # torch and DeepSpeed: only for learners

        return run_follower(config, follows)
    everything = "all" in args.role
    until_finished = args.until_finished or everything
    return run_node(
        config,
        roles,
        name,
        embedded=everything and not args.nats,
        duration_s=args.duration,
        until_finished=until_finished,
        resume=args.resume,
        health_file=args.health_file,
        sub_types=sub_types,
    )


def run_node(
    config: NodeConfig,
    roles: list[str],
    name: str,
    embedded: bool,
    duration_s: float | None,
    until_finished: bool = False,
    watch: Callable[[Bus], Any] | None = None,
    resume: bool = False,
    health_file: str | None = None,
    sub_types: tuple[str, ...] | None = None,
) -> int:
    """Connect, start the roles' actors, wait for a stop signal (or the run's end), then drain.

    watch(bus) is called once the roles run (e.g. `mgrpo run`'s progress view). sub_types: the sub-agent types
    the node's sub-side roles serve (None: every type of the run). Returns the exit code.
    """
    log = get_logger("mgrpo.node")
    if config.run.compute_thread and any(role.endswith(("-agent", "-learner")) for role in roles):
        start_compute_thread()  # the roles' torch work on one thread (mgrpo_actors/runtime/compute.py)
    stop = ShutdownSignal().install()
    lost = threading.Event()
    run_dir = Path(config.run.dir) / config.run.id
    try:
        server, security = _connection(config, run_dir, embedded, resume)
    except DiskFullError as exc:  # its own line, without OSError's "[Errno 28]"
        return _fail(exc.strerror, EXIT_USAGE)
    except (ValueError, OSError) as exc:  # a password file, a certificate, the run's credentials file
        return _fail(str(exc), EXIT_USAGE)
    url = server.url if server else config.nats.url

    def connection_lost() -> None:  # reconnect attempts used up: exit 3 so a supervisor restarts us
        lost.set()
        stop.set()

    bus = Bus(
        url,
        run_id=config.run.id,
        node=name,
        connect_timeout_s=config.nats.connect_timeout_s,
        max_reconnect_attempts=config.nats.max_reconnect_attempts,
        reconnect_wait_s=config.nats.reconnect_wait_s,
        ping_interval_s=config.nats.ping_interval_s,
        request_timeout_s=config.nats.request_timeout_s,
        max_bytes=config.nats.max_message_bytes,
        on_connection_lost=connection_lost,
        deliveries_dir=config.log.deliveries_dir,
        mailbox_limit=config.nats.mailbox_limit,
        pending_bytes_limit=config.nats.pending_bytes_limit,
        security=security,
        store_dir=server.jetstream_dir if server else None,  # its store filling up stops the run, naming it
        sub_types=config.sub_types,
    )
    try:
        bus.connect()
    except BusConnectError as exc:
        if server:
            server.stop()
        return _fail(str(exc), EXIT_NATS)
    if server is not None and resume:  # every role of the run is here and none runs yet: nothing is mid-work
        redeliver_unacked(bus, bus.subjects.streams(), config.pipeline.ack_wait_s)
    actors: list[Any] = []
    failed: list[str] = []
    stalled: list[str] = []  # why a role stopped the run unfinished (the controller's watchdog, a full store): exit 3

    def actor_failed(actor: str, error: str) -> None:  # a role is gone: stop, exit 1, let a supervisor restart us
        failed.append(f"{actor}: {error}")
        stop.set()

    bus.on_actor_failed = actor_failed
    bus.on_run_stopped = lambda why: (stalled.append(why), stop.set())
    code = 0
    try:
        if watch is not None:
            watch(bus)  # before the roles start, so it sees the first step begin
        if until_finished:  # before the roles start: a controller whose run is over says so as it starts
            # A monitor (which may replay a run long finished) says when it has shown the end and written the report.
            awaited = (MONITOR_REPORTED, name) if "monitor" in roles else (RUN_FINISHED, None)
            bus.subscribe(bus.subjects.events, lambda delivery: _stop_when_finished(delivery, stop, *awaited))
        code = _start(bus, config, roles, actors, sub_types or config.sub_types)
        if code != 0 and lost.is_set():
            code = EXIT_NATS  # the start failed because NATS went away meanwhile
        if code == 0:
            log.info("node started", nats=url, embedded=bool(server), actors=len(actors))
            bus.publish(
                bus.subjects.events,
                Event(
                    kind="node.started", message=f"{name} started {', '.join(roles)}", node=name, role=",".join(roles)
                ),
            )
            wait_for_stop(stop, duration_s, HealthFile(health_file, lambda: bus.connected) if health_file else None)
            code = EXIT_NATS if lost.is_set() or stalled else EXIT_FAILED if failed else 0
            reason = (
                "NATS connection lost"
                if lost.is_set()
                else f"run stopped: {stalled[0]}"
                if stalled
                else f"actor failed: {failed[0]}"
                if failed
                else stop.signal_name or ("run finished" if stop.is_set() else "duration elapsed")
            )
            log.info("node stopping", reason=reason)
    finally:
        bus.stop_fetching()  # no new stream work; request/reply servers stay up for the clients still finishing
        stop_actors(actors, config.run.stop_timeout_s)
        bus.stop_intake()
        if bus.connected:
            bus.publish(
                bus.subjects.events,
                Event(kind="node.stopped", message=f"{name} stopped", node=name, role=",".join(roles)),
            )
        bus.drain()
        if server:
            server.stop()
    log.info("node stopped", dead_letters=bus.dead_letter_total, exit_code=code)
    return _fail(f"run stopped: {stalled[0]}", code) if stalled else code  # the last line: why it did not finish


def _connection(
    config: NodeConfig, run_dir: Path, embedded: bool, resume: bool
) -> tuple[EmbeddedNats | None, ConnectSecurity | None]:
    """The run's embedded server (started) and its user, or no server and whom `nats.url` is connected as:
    nats.auth, else the run's own user when nats.url is its embedded server (a node joining it)."""
    if embedded:
        server, credentials = start_run_server(
            run_dir, resume, config.nats.max_message_bytes, config.nats.embedded_memory_limit_mib
        )
        return server, credentials.security()
    security = config.nats.security(config.nats.url)
    if not config.nats.auth.user and (joined := matching_run_credentials(run_dir, config.nats.url)):
        security = dataclasses.replace(security or ConnectSecurity(), user=joined.user, password=joined.password)
    return None, security


def start_roles(
    bus: Bus, config: NodeConfig, roles: list[str], actors: list[Any], sub_types: tuple[str, ...] | None = None
) -> None:
    """Create the run's streams and start the node's actors into `actors` (so whatever started is
    stopped on any failure), the sub side's for `sub_types` (None: every type of the run); used by `mgrpo-node`
    and `mgrpo run`."""
    served = sub_types or config.sub_types
    bus.ensure_streams(node_streams(roles, config.sub_types, served), config.nats.stream_limits)
    actors.append(NodeInfoActor.start_ready(bus, roles))
    for role in roles:
        ROLES[role].start_actors(bus, config, actors, served)


def _start(bus: Bus, config: NodeConfig, roles: list[str], actors: list[Any], sub_types: tuple[str, ...]) -> int:
    """start_roles, with its failures turned into messages and exit codes."""
    try:
        start_roles(bus, config, roles, actors, sub_types)
    except BusError as exc:
        return _fail(str(exc), EXIT_NATS)
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        return _fail(f"cannot start: {exc}", EXIT_USAGE)
    except Exception as exc:
        get_logger("mgrpo.node").exception("node failed to start")
        return _fail(f"cannot start: {type(exc).__name__}: {exc}", EXIT_FAILED)
    return 0


def _stop_when_finished(delivery: Any, stop: ShutdownSignal, kind: str = RUN_FINISHED, node: str | None = None) -> None:
    """On the bus thread: stop the node on the event `kind` (from `node` if given): the controller's
    run.finished, or this node's monitor having reported it."""
    try:
        event = decode(delivery.data)
    except ProtocolError:
        return
    if isinstance(event, Event) and event.kind == kind and (node is None or event.node == node):
        stop.set()


def stop_actors(actors: list[Any], timeout_s: float) -> None:
    """Stop the actors one by one in reverse start order (the controller and the agents before the
    sub-agents and tools they call), each after what is in its mailbox: pykka queues stop() behind it,
    so work in hand finishes with the servers it needs still up. All within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    for ref in reversed(actors):
        try:
            ref.stop(block=True, timeout=max(0.1, deadline - time.monotonic()))
        except Exception:
            get_logger("mgrpo.node").warning("actor did not stop in time", actor=str(ref))


if __name__ == "__main__":
    sys.exit(main())
