"""`mgrpo run` (`make run`): the main job on one machine, on an embedded nats-server.

Starts every built role in this process (today: `tool`), checks the bus end to end (node ping, one
call per served tool), then rolls one question of the built-in synthetic web out K times through the
main agent and its sub-agents, with every search/visit call served by the tool actors over NATS,
and prints both agents' transcripts and the reward parts. The M-GRPO training loop (controller,
aligners, learners) joins here when those roles are built; until then this command says which roles
are missing instead of pretending to train.

    mgrpo run                                  # SmolLM2 as M and S, K = 2 (about a minute on 2 cores)
    mgrpo run --main tiny:main --sub tiny:sub  # tiny random models: seconds
    mgrpo run --no-rollout                     # only the bus check
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from actors.node import start_roles, stop_actors
from actors.roles import ROLES
from mgrpo_actors.cli import rollout as rollout_command
from mgrpo_actors.config import ConfigError, NodeConfig, load_config
from mgrpo_actors.log import configure_logging
from mgrpo_actors.runtime import Bus, EmbeddedNats
from mgrpo_actors.tools.setup import served_pages
from protocols import NodeInfo, NodePing, ToolRequest

__all__ = ["add_parser", "run_job"]


def _sample_calls(config: NodeConfig) -> list[ToolRequest]:
    page = served_pages(config.tools)[0]
    return [
        ToolRequest(call_id="run-search", tool="search", arguments={"query": page.title, "k": 3}),
        ToolRequest(call_id="run-visit", tool="visit", arguments={"url": page.url, "goal": f"what is {page.title}?"}),
    ]


def _check_bus(bus: Bus, config: NodeConfig, console: Console) -> None:
    info = bus.request(bus.subjects.node_ping, NodePing(requester="mgrpo run"))
    assert isinstance(info, NodeInfo)
    table = Table(title="end-to-end check over NATS")
    for col in ("call", "ok", "ms", "result (first line)"):
        table.add_column(col)
    for request in _sample_calls(config):
        if request.tool not in config.tools.serve:
            continue
        t = time.perf_counter()
        result = bus.request(bus.subjects.tool(request.tool), request, timeout_s=config.nats.request_timeout_s)
        first = ((getattr(result, "content", "") or getattr(result, "error", "") or "").splitlines() or [""])[0][:70]
        table.add_row(f"{request.tool}({request.arguments})"[:60], str(getattr(result, "ok", False)), f"{(time.perf_counter() - t) * 1e3:.1f}", first)
    console.print(table)
    console.print(f"node {info.node}: roles {info.roles}, dead letters {info.dead_letters}")


def _rollout_args(args: argparse.Namespace, config: NodeConfig) -> argparse.Namespace:
    """The `mgrpo rollout` arguments for this run (its defaults, with our models, K and web)."""
    parser = argparse.ArgumentParser()
    rollout_command.add_parser(parser.add_subparsers())
    argv = ["rollout", "--main", args.main, "--sub", args.sub, "--k", str(args.k), "--seed", str(config.run.seed)]
    argv += ["--web-seed", str(config.tools.web_seed), "--entities", str(config.tools.web_entities)]
    return parser.parse_args(argv)


def _rollout_over_bus(bus: Bus, args: argparse.Namespace, config: NodeConfig, console: Console) -> int:
    from mgrpo_actors.agents.driver import registry_executor
    from mgrpo_actors.pipeline.tool_client import bus_tool_executor

    console.rule(f"one question, K = {args.k}: M {args.main}, S {args.sub}; {', '.join(config.tools.serve)} served by tool actors over NATS")
    view = importlib.import_module("mgrpo_actors.cli.rollout_view")  # torch/transformers: imported on use

    def make_executor(tools: Any) -> Any:
        return bus_tool_executor(bus, remote=config.tools.serve, local=registry_executor(tools), timeout_s=config.nats.request_timeout_s, caller="mgrpo-run")

    return view.run_rollout_command(_rollout_args(args, config), make_executor=make_executor)


def run_job(config: NodeConfig, args: argparse.Namespace, console: Console) -> int:
    built = [name for name, spec in ROLES.items() if spec.start]
    missing = [name for name, spec in ROLES.items() if not spec.start]
    code = 0
    with EmbeddedNats(max_payload=config.nats.max_message_bytes) as server, Bus(server.url, run_id=config.run.id, node="run", max_bytes=config.nats.max_message_bytes, request_timeout_s=config.nats.request_timeout_s) as bus:
        console.print(f"embedded nats-server at {server.url}; run id {config.run.id!r}")
        t0 = time.perf_counter()
        actors: list[Any] = []
        try:
            start_roles(bus, config, built, actors)
            console.print(f"started roles {', '.join(built)} ({len(actors)} actors) in {time.perf_counter() - t0:.1f} s")
            _check_bus(bus, config, console)
            if not args.no_rollout:
                code = _rollout_over_bus(bus, args, config, console)
                console.print(f"dead letters on the bus: {bus.dead_letter_total}")
        finally:
            bus.stop_intake()
            stop_actors(actors, config.run.stop_timeout_s)
    console.print(
        f"[bold]Training not run:[/bold] roles {', '.join(missing)} are not built yet "
        "(they come with the NATS pipeline and DeepSpeed learner issues)."
    )
    return code


def _run(args: argparse.Namespace) -> int:
    try:
        config = load_config(NodeConfig, args.config, args.overrides)
    except ConfigError as exc:
        print(f"mgrpo run: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(run_id=config.run.id, node="run", role="all", level="warning")
    # SIGTERM unwinds like Ctrl-C, so the embedded nats-server and its store are cleaned up.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    return run_job(config, args, Console())


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run the main job on an embedded nats-server (make run)", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="YAML config (same format as mgrpo-node)")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--main", default="smollm2", metavar="SPEC", help="main agent's model (default smollm2)")
    p.add_argument("--sub", default="smollm2", metavar="SPEC", help="sub-agent's model (default smollm2, a separate instance)")
    p.add_argument("--k", type=int, default=2, help="rollouts of the question (default 2)")
    p.add_argument("--no-rollout", action="store_true", help="only start the roles and check the bus")
    p.set_defaults(func=_run)
