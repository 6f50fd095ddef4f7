"""The two sides on two "servers" that share nothing but NATS (issue 11): the main side's roles run in
one network namespace, the sub side's in another, each joined by a veth pair to the namespace of the
nats-server (with the controller and the tools) and to nothing else: no route between the two, no
forwarding. A 2-step run with both learners completes, so nothing but NATS connects the sides.

Needs root and `ip netns` (iproute2); where the machine does not allow them, the test is skipped and
says why."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from mgrpo_actors.runtime import Bus, EmbeddedNats
from protocols import StepDone
from tests.helpers import REPO, subprocess_env, venv_script
from tests.pipeline_helpers import EventLog, pipeline_config, read_stream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

STEPS = 2
SIDES = {"main": ["main-agent", "main-aligner", "main-learner"], "sub": ["sub-agent", "sub-aligner", "sub-learner"]}
SHARED = ["tool", "controller"]  # serve both sides: in the NATS server's namespace


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


def _namespaces_allowed() -> str:
    """Why the test cannot run here ("" when it can)."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"mgrpo-probe-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as exc:
        return f"`ip netns add` is refused here: {exc.stderr.strip()}"
    _ip("netns", "del", probe)
    return ""


@pytest.fixture
def side_namespaces():
    """{side: (namespace, the NATS host's address as seen from it)}; torn down after the test."""
    why = _namespaces_allowed()
    if why:
        pytest.skip(f"two network namespaces cannot be made on this machine: {why}")
    tag = uuid.uuid4().hex[:4]
    made: dict[str, tuple[str, str]] = {}
    try:
        for i, side in enumerate(("main", "sub"), start=1):
            ns, outer, inner = f"mgrpo-{side}-{tag}", f"mg{side[0]}{tag}o", f"mg{side[0]}{tag}i"
            host, guest = f"10.231.{i}.1", f"10.231.{i}.2"
            _ip("netns", "add", ns)
            made[side] = (ns, host)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", ns)
            _ip("addr", "add", f"{host}/24", "dev", outer)
            _ip("link", "set", outer, "up")
            _ip("netns", "exec", ns, "ip", "addr", "add", f"{guest}/24", "dev", inner)
            _ip("netns", "exec", ns, "ip", "link", "set", inner, "up")
            _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")  # the learner's own gloo group is on loopback
        yield made
    finally:
        for ns, _ in made.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)  # its veth ends go with it


def _reachable(ns: str, host: str, port: int) -> bool:
    code = f"import socket; socket.create_connection(({host!r}, {port}), timeout=2)"
    return (
        subprocess.run(
            ["ip", "netns", "exec", ns, str(venv_script("python")), "-c", code], capture_output=True, timeout=30
        ).returncode
        == 0
    )


def test_the_sides_in_two_network_namespaces_joined_only_by_nats_complete_a_run(side_namespaces, tmp_path):
    server = EmbeddedNats(host="0.0.0.0").start()  # every address: the namespaces reach it over their veth pairs
    port = server.port
    main_ns, main_host = side_namespaces["main"]
    sub_ns, sub_host = side_namespaces["sub"]
    assert _reachable(main_ns, main_host, port) and _reachable(sub_ns, sub_host, port)
    # the sides cannot reach each other
    assert not _reachable(main_ns, sub_host, port) and not _reachable(sub_ns, main_host, port)
    learner = {"lr": 1e-2, "zero_stage": 2, "micro_batch_samples": 4}
    config = pipeline_config(
        tmp_path,
        "netns",
        pipeline={"steps": STEPS, "advance_on": "learners"},
        learners={"main": learner, "sub": learner},
    )
    env = {**subprocess_env(), "PYTHONPATH": str(REPO)}
    procs: dict[str, subprocess.Popen] = {}
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(role: str, url: str, ns: str | None) -> None:
        command = [
            str(venv_script("mgrpo-node")),
            "--role",
            role,
            "--config",
            str(config),
            "--nats",
            url,
            "--name",
            role,
        ]
        out = open(logs / f"{role}.log", "w")  # noqa: SIM115 - the process owns it
        procs[role] = subprocess.Popen(
            (["ip", "netns", "exec", ns] if ns else []) + command,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    try:
        with Bus(server.url, run_id="netns", node="watcher") as bus:
            events = EventLog(bus)
            for side, (ns, host) in side_namespaces.items():
                for role in SIDES[side]:
                    start(role, f"nats://{host}:{port}", ns)
            for role in SHARED:
                start(role, server.url, None)
            events.wait_for(
                "run.finished",
                timeout_s=300,
                describe=lambda: "\n".join(f"--- {r}\n{(logs / f'{r}.log').read_text()[-1500:]}" for r in procs),
            )
            done = [m for m in read_stream(bus, bus.subjects.stream("steps")) if isinstance(m, StepDone)]
            for side in ("main", "sub"):
                assert [(d.step, d.version) for d in done if d.side == side] == [(s, s + 1) for s in range(STEPS)], side
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(45)
            except subprocess.TimeoutExpired:
                proc.kill()
        server.stop()
    assert all(proc.returncode == 0 for proc in procs.values()), {r: p.returncode for r, p in procs.items()}
