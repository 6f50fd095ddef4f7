"""A 3-server NATS cluster on loopback with every stream, KV bucket and object store in 3 replicas
(`nats.replicas: 3`), every role its own process, learners included, and the nodes given all three
URLs. The NATS server leading the steps stream is killed (SIGKILL) once the first step is done; the run
still completes with each side's steps done exactly once each, in order, and every batch applied once
(issue 11)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import nats
import pytest

from mgrpo_actors.runtime import Bus, nats_server_binary
from protocols import StepDone
from tests.helpers import wait_until
from tests.pipeline_helpers import EventLog, NodeProcesses, pipeline_config, read_stream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

STEPS = 3
TOPOLOGY = [
    "tool",
    "sub-agent",
    "main-agent",
    "main-aligner",
    "sub-aligner",
    "main-learner",
    "sub-learner",
    "controller",
]


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class LoopbackCluster:
    """Three nats-server processes routed to each other, JetStream on, each with its own store."""

    def __init__(self, root: Path) -> None:
        ports = _free_ports(6)
        self.client_ports, self.route_ports = ports[:3], ports[3:]
        self.root = root
        self.procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return ",".join(f"nats://127.0.0.1:{p}" for p in self.client_ports)

    def start(self) -> LoopbackCluster:
        for i, (port, route) in enumerate(zip(self.client_ports, self.route_ports)):
            others = [f"nats-route://127.0.0.1:{r}" for r in self.route_ports if r != route]
            conf = self.root / f"c{i}.conf"
            conf.write_text(
                f'server_name: "c{i}"\nlisten: "127.0.0.1:{port}"\nmax_payload: 33554432\nwrite_deadline: "10s"\n'
                f"jetstream {{ store_dir: {json.dumps(str(self.root / f'js{i}'))} }}\n"
                f'cluster {{ name: "test", listen: "127.0.0.1:{route}", routes: {json.dumps(others)} }}\n'
            )
            log = open(self.root / f"c{i}.log", "wb")  # noqa: SIM115 - the server owns it
            self.procs.append(
                subprocess.Popen(
                    [str(nats_server_binary()), "-c", str(conf)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        wait_until(
            self._jetstream_ready, timeout_s=30, interval_s=0.2, what="the cluster's JetStream never became ready"
        )
        return self

    def _jetstream_ready(self) -> bool:
        async def check() -> bool:
            nc = await nats.connect(self.url.split(","), allow_reconnect=False, connect_timeout=1)
            try:
                await nc.jetstream().account_info()
                return True
            finally:
                await nc.close()

        try:
            return asyncio.run(check())
        except Exception:
            return False

    def kill(self, index: int) -> None:
        self.procs[index].send_signal(signal.SIGKILL)
        self.procs[index].wait()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _what_happened(bus: Bus, events: EventLog, nodes: NodeProcesses) -> str:
    """For a failed wait: the run's events and each side's StepDone in order (which side stalled where), then the
    end of every node's log."""
    try:
        done = [
            f"{m.side} step {m.step} -> v{m.version}"
            for m in read_stream(bus, bus.subjects.stream("steps"))
            if isinstance(m, StepDone)
        ]
    except Exception as exc:  # the cluster itself may be what failed
        done = [f"(steps stream unreadable: {exc!r})"]
    logs = "\n".join(f"--- {r}\n{nodes.output(r)[-1200:]}" for r in TOPOLOGY)
    return f"events:\n{events.timeline()}\nStepDone: {done}\n{logs}"


def test_a_run_on_a_three_server_cluster_survives_losing_one_server(tmp_path):
    cluster = LoopbackCluster(tmp_path).start()
    learner = {"lr": 1e-2, "zero_stage": 2, "micro_batch_samples": 4}
    config = pipeline_config(
        tmp_path,
        "clustered",
        nats={"replicas": 3},
        pipeline={"steps": STEPS, "advance_on": "learners"},
        learners={"main": learner, "sub": learner},
    )
    try:
        with Bus(cluster.url, run_id="clustered", node="watcher", reconnect_wait_s=0.2) as bus:
            events = EventLog(bus)
            nodes = NodeProcesses(cluster.url, config, tmp_path / "logs")
            try:
                for role in TOPOLOGY:
                    nodes.start(role, role)
                events.wait_for(
                    "step.finished",
                    timeout_s=240,
                    describe=lambda: "\n".join(nodes.output(r)[-1500:] for r in TOPOLOGY),
                )
                leader = bus.stream_info(
                    bus.subjects.stream("steps")
                ).cluster.leader  # the server leading the steps stream ("c0".."c2")
                killed_at = time.monotonic()
                # and some nodes were connected to it (nats-py shuffles the URLs)
                cluster.kill(int(leader.removeprefix("c")))
                # Patient: a step whose messages were in flight on the killed server may wait out the aligner's
                # and the rollouts' step timeouts (120 s each) before the run goes on; 38-70 s when none were.
                events.wait_for("run.finished", timeout_s=420, describe=lambda: _what_happened(bus, events, nodes))
                print(
                    f"run finished {time.monotonic() - killed_at:.1f} s after one of the three NATS servers was killed"
                )
            finally:
                codes = nodes.stop_all()
            assert all(code == 0 for code in codes.values()), codes
            assert bus.stream_info(bus.subjects.stream("steps")).config.num_replicas == 3
            for bucket in ("KV_" + bus.subjects.bucket("state-main"), "OBJ_" + bus.subjects.bucket("weights-sub")):
                assert bus.stream_info(bucket).config.num_replicas == 3, bucket
            done = [m for m in read_stream(bus, bus.subjects.stream("steps")) if isinstance(m, StepDone)]
            for side in ("main", "sub"):
                mine = [(d.step, d.version) for d in done if d.side == side]
                # every step once, in order: every batch applied once
                assert mine == [(s, s + 1) for s in range(STEPS)], (side, mine)
    finally:
        cluster.stop()
