"""What the pipeline's multi-process tests share: a config for tiny models under the rule policy,
starting `mgrpo-node` processes per role, waiting for the run's end, and reading streams back."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from pathlib import Path
from typing import Any

import yaml

from mgrpo_actors.runtime import Bus
from mgrpo_actors.runtime.stream_reader import follow_stream
from protocols import AlignedBatch, Event, Message, ProtocolError, decode
from tests.helpers import REPO, start_script, stop_process, wait_until

__all__ = ["EventLog", "NodeProcesses", "pipeline_config", "read_stream", "received", "side_batches", "two_type_config"]

RULE_ENGINE = "tests.pipeline_policy:rule_engine"


def pipeline_config(tmp_path: Path, run_id: str, **sections: dict[str, Any]) -> Path:
    """A node config file: tiny models driven by the rule policy, a small web, short timeouts."""
    agent = {"engine": RULE_ENGINE, "max_turns": 4, "max_new_tokens_per_turn": 200, "max_context_tokens": 4096}
    config: dict[str, Any] = {
        "run": {"id": run_id, "stop_timeout_s": 10, "dir": str(tmp_path / "runs")},
        "log": {"level": "warning", "json": True, "deliveries_dir": str(tmp_path / "deliveries")},
        "tools": {"web_entities": 150, "actors_per_tool": 1},
        "agents": {"main": {**agent, "model": "tiny:main"}, "sub": {**agent, "model": "tiny:sub"}},
        "pipeline": {
            "steps": 2,
            "queries_per_step": 3,
            "rollouts_per_query": 2,
            "subtask_timeout_s": 20,
            "tool_timeout_s": 10,
            "ack_wait_s": 30,
            "rollout_timeout_s": 120,
            "advance_on": "batches",
        },
        "algo": {"alignment": {"d": 2}},
        # No learner runs unless a test starts one (and sets `learners`): a training side would hold the run
        # at max_staleness steps ahead of learners that never come (controller/cursor.py, the version bound).
        "learners": {"main": {"frozen": True}, "sub": {"frozen": True}},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def two_type_config(tmp: Path, run_id: str, shape: tuple[int, int, int, int], **sections: dict[str, Any]) -> Path:
    """pipeline_config's tiny models under the rule policy, with two sub-agent types: a `searcher` (search and visit)
    and a `calculator` (the calculator tool); `shape` is (B, K, D, steps)."""
    b, k, d, steps = shape
    pipeline = {"steps": steps, "queries_per_step": b, "rollouts_per_query": k, **sections.pop("pipeline", {})}
    config = pipeline_config(
        tmp,
        run_id,
        tools={"web_entities": 150, "actors_per_tool": 1, "serve": ["search", "visit", "calculator"]},
        pipeline=pipeline,
        algo={"alignment": {"d": d}},
        **sections,
    )
    data = yaml.safe_load(config.read_text())
    data["agents"]["subs"] = {
        "searcher": {"description": "it searches the web and reads pages"},
        "calculator": {"tools": ["calculator"], "description": "it computes arithmetic"},
    }
    config.write_text(yaml.safe_dump(data))
    return config


class NodeProcesses:
    """`mgrpo-node` processes by name, output in files under `logs`; all stopped by `stop_all()`."""

    def __init__(self, url: str, config: Path, logs: Path, env: dict[str, str] | None = None) -> None:
        self.url, self.config, self.logs = url, config, logs
        self.env = {"PYTHONPATH": str(REPO), **(env or {})}
        self.procs: dict[str, subprocess.Popen] = {}
        logs.mkdir(parents=True, exist_ok=True)

    def start(
        self,
        name: str,
        *roles: str,
        env: dict[str, str] | None = None,
        extra: tuple[str, ...] = (),
        config: Path | None = None,
    ) -> subprocess.Popen:
        """Start node `name` with `roles` (and its own `config`, else the shared one)."""
        args = [*(a for role in roles for a in ("--role", role)), *extra]
        out = open(self.logs / f"{name}.log", "w")  # noqa: SIM115 - the process owns it
        env = {**self.env, **(env or {})}
        proc = start_script(
            "mgrpo-node",
            *args,
            "--config",
            str(config or self.config),
            "--nats",
            self.url,
            "--name",
            name,
            env=env,
            stdout=out,
        )
        self.procs[name] = proc
        return proc

    def output(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()

    def tails(self, chars: int = 1500) -> str:
        """The last `chars` of every node's output, each under its name (for a failed wait's message)."""
        return "\n".join(f"--- {name}\n{self.output(name)[-chars:]}" for name in self.procs)

    def stop_all(self) -> dict[str, int]:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()  # once: a second SIGTERM would kill the node instead of stopping it
        for proc in self.procs.values():
            try:
                proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                stop_process(proc, timeout_s=1)
        return {name: proc.returncode for name, proc in self.procs.items()}


class EventLog:
    """Every Event of the run, as they are published (subscribed before the nodes start)."""

    def __init__(self, bus: Bus) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()
        bus.subscribe(bus.subjects.events, self._on)

    def _on(self, delivery: Any) -> None:
        try:
            message = decode(delivery.data)
        except ProtocolError:
            return
        if isinstance(message, Event):
            with self._lock:
                self.events.append(message)

    def kinds(self, kind: str) -> list[Event]:
        with self._lock:
            return [e for e in self.events if e.kind == kind]

    def timeline(self) -> str:
        """Every event so far, one line each (kind, role, message): what a failed wait prints first."""
        with self._lock:
            return "\n".join(f"{e.kind} [{e.role or e.node}] {e.message[:160]}" for e in self.events)

    def wait_for(self, kind: str, timeout_s: float, describe: Any = "") -> Event:
        return wait_until(lambda: (self.kinds(kind) or [None])[0], timeout_s=timeout_s, what=describe)


def side_batches(bus: Bus, side: str) -> list[AlignedBatch]:
    """Every AlignedBatch on `side`'s batch stream (its chunks as they are stored)."""
    return [m for m in read_stream(bus, bus.subjects.stream(f"batch-{side}")) if isinstance(m, AlignedBatch)]


def read_stream(bus: Bus, stream: str, subject: str = ">") -> list[Message]:
    """Every message stored in `stream` (on `subject`), decoded, in order: direct gets, which take and
    ack nothing and need no consumer (so a read-only user, like a deployment's tap users, reads this way too)."""

    async def read() -> list[bytes]:
        info = await bus._js.stream_info(stream)
        total, last_seq = info.state.messages, info.state.last_seq
        found: list[bytes] = []
        done = asyncio.Event()

        async def on_msg(msg: Any) -> None:
            found.append(msg.data)
            if len(found) >= total or msg.pending == 0 or msg.seq >= last_seq:
                done.set()

        if total == 0:
            return found
        sub = await follow_stream(bus._nc, stream, subject, on_msg)
        try:
            await asyncio.wait_for(done.wait(), 30)  # a loaded machine may take a while
        except TimeoutError:
            pass
        finally:
            await sub.unsubscribe()
        return found

    return [decode(data, bus.max_bytes) for data in bus.call(read(), timeout=60)]


def received(deliveries_dir: Path, node: str) -> list[dict[str, Any]]:
    """What node `node` received so far, from its delivery audit (log.deliveries_dir)."""
    path = deliveries_dir / f"{node}.jsonl"
    if not path.exists():
        return []
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
