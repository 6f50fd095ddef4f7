"""`mgrpo run` (`make run`): the main job on one machine, on an embedded nats-server.

Starts every built role in this process (today: `tool`), checks the bus end to end (node ping, one
call per served tool with a question of the built-in synthetic web) and prints a summary. The
M-GRPO training loop (controller, agents, aligners, learners) joins here when those roles are built;
until then this command says which roles are missing instead of pretending to train.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from mgrpo_actors.cli.roles import ROLES
from mgrpo_actors.config import ConfigError, NodeConfig, load_config
from mgrpo_actors.log import configure_logging
from mgrpo_actors.runtime import Bus, EmbeddedNats
from protocols import NodeInfo, NodePing, ToolRequest

__all__ = ["add_parser", "run_job"]


def _sample_calls(config: NodeConfig) -> list[ToolRequest]:
    from mgrpo_actors.envs.synthetic_web import SyntheticWebConfig, build_synthetic_web
    from mgrpo_actors.envs.world import WorldConfig

    web = build_synthetic_web(SyntheticWebConfig(world=WorldConfig(seed=config.tools.web_seed, num_entities=config.tools.web_entities)))
    page = web.pages[0]
    return [
        ToolRequest(call_id="run-search", tool="search", arguments={"query": page.title, "k": 3}),
        ToolRequest(call_id="run-visit", tool="visit", arguments={"url": page.url, "goal": f"what is {page.title}?"}),
    ]


def run_job(config: NodeConfig, console: Console) -> int:
    built = [name for name, spec in ROLES.items() if spec.start]
    missing = [name for name, spec in ROLES.items() if not spec.start]
    with EmbeddedNats(max_payload=config.nats.max_message_bytes) as server, Bus(server.url, run_id=config.run.id, node="run", max_bytes=config.nats.max_message_bytes) as bus:
        console.print(f"embedded nats-server at {server.url}; run id {config.run.id!r}")
        bus.ensure_streams()
        from actors.node_info import NodeInfoActor  # composition root: the one place that knows actors

        t0 = time.perf_counter()
        actors: list[Any] = [NodeInfoActor.start_ready(bus, built)]
        for role in built:
            actors.extend(ROLES[role].start(bus, config))  # type: ignore[misc]
        console.print(f"started roles {', '.join(built)} ({len(actors)} actors) in {time.perf_counter() - t0:.1f} s")
        info = bus.request(bus.subjects.node_ping, NodePing(requester="mgrpo run"))
        assert isinstance(info, NodeInfo)
        table = Table(title="end-to-end check over NATS")
        for col in ("call", "ok", "ms", "result (first line)"):
            table.add_column(col)
        for request in _sample_calls(config):
            t = time.perf_counter()
            result = bus.request(bus.subjects.tool(request.tool), request, timeout_s=config.nats.request_timeout_s)
            first = (getattr(result, "content", "") or getattr(result, "error", "") or "").splitlines()[0][:70]
            table.add_row(f"{request.tool}({request.arguments})"[:60], str(getattr(result, "ok", False)), f"{(time.perf_counter() - t) * 1e3:.1f}", first)
        console.print(table)
        console.print(f"node {info.node}: roles {info.roles}, dead letters {info.dead_letters}")
        bus.stop_intake()
        for ref in reversed(actors):
            ref.stop()
    console.print(
        f"[bold]Training not run:[/bold] roles {', '.join(missing)} are not built yet "
        "(they come with the NATS pipeline and DeepSpeed learner issues)."
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    try:
        config = load_config(NodeConfig, args.config, args.overrides)
    except ConfigError as exc:
        print(f"mgrpo run: error: {exc}")
        return 2
    configure_logging(run_id=config.run.id, node="run", role="all", level="warning")
    return run_job(config, Console())


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run the main job on an embedded nats-server (make run)", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="YAML config (same format as mgrpo-node)")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE", help="override a config key")
    p.set_defaults(func=_run)
