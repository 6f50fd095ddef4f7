"""`mgrpo-node` as a real subprocess (`.venv/bin/mgrpo-node`): usage errors exit 2 naming what is wrong,
unreachable NATS exits 3 naming the URL, --print-config shows the resolved config, and a `--role tool`
node on a real nats-server answers pings and tool requests and stops gracefully on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
import yaml

from actors.roles import ROLES
from mgrpo_actors.runtime import NoResponders, RequestTimeout
from protocols import SCHEMA_VERSION, Event, NodeInfo, NodePing, ToolRequest, ToolResult, decode
from tests.helpers import closed_port_url, run_script, start_script, stop_process, wait_until

pytestmark = pytest.mark.integration


def test_unknown_role_exits_2_listing_the_valid_roles():
    result = run_script("mgrpo-node", "--role", "bogus", "--nats", closed_port_url())
    assert result.returncode == 2, result.stderr
    assert "'bogus'" in result.stderr
    for role in [*ROLES, "all"]:
        assert role in result.stderr
    assert "Traceback" not in result.stderr


def test_no_role_exits_2_listing_the_valid_roles():
    result = run_script("mgrpo-node", "--nats", closed_port_url())
    assert result.returncode == 2
    assert "--role" in result.stderr and "tool" in result.stderr and "controller" in result.stderr


@pytest.mark.timeout(180)
def test_role_all_runs_every_built_role_on_an_embedded_server_until_the_run_is_finished():
    tiny = [
        "--set",
        "agents.main.model=tiny:main",
        "--set",
        "agents.sub.model=tiny:sub",
        "--set",
        "tools.web_entities=150",
    ]
    result = run_script(
        "mgrpo-node", "--role", "all", *tiny, "--set", "pipeline.steps=1", "--set", "log.json=true", timeout_s=170
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert '"event": "node started"' in result.stderr and '"embedded": true' in result.stderr
    assert '"reason": "run finished"' in result.stderr


def test_unreachable_nats_exits_3_quickly_naming_the_url():
    url = closed_port_url()
    # A hang would hit the subprocess timeout; the node must give up on its own within connect_timeout_s.
    result = run_script(
        "mgrpo-node", "--role", "tool", "--nats", url, "--set", "nats.connect_timeout_s=2", timeout_s=20
    )
    assert result.returncode == 3, result.stderr
    assert url in result.stderr and "cannot reach NATS" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_config_key_exits_2_naming_it():
    result = run_script("mgrpo-node", "--role", "tool", "--set", "nats.urll=nats://x:1")
    assert result.returncode == 2
    assert "'nats.urll'" in result.stderr
    assert "url" in result.stderr and "connect_timeout_s" in result.stderr  # the valid keys


def test_unknown_key_in_a_config_file_exits_2_naming_it(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("tools:\n  actors_per_tol: 3\n")
    result = run_script("mgrpo-node", "--role", "tool", "--config", str(path))
    assert result.returncode == 2
    assert "'tools.actors_per_tol'" in result.stderr and "actors_per_tool" in result.stderr


def test_bad_config_value_and_missing_file_exit_2(tmp_path):
    result = run_script("mgrpo-node", "--role", "tool", "--set", "tools.actors_per_tool=many")
    assert result.returncode == 2 and "'tools.actors_per_tool'" in result.stderr
    result = run_script("mgrpo-node", "--role", "tool", "--config", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2 and "missing.yaml" in result.stderr
    result = run_script("mgrpo-node", "--role", "tool", "--run-id", "bad.run")
    assert result.returncode == 2 and "bad.run" in result.stderr


def test_print_config_shows_file_overrides_and_flags(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("run:\n  id: from-file\n  seed: 7\ntools:\n  actors_per_tool: 3\n")
    result = run_script(
        "mgrpo-node",
        "--print-config",
        "--config",
        str(path),
        "--set",
        "tools.actors_per_tool=5",
        "--nats",
        "nats://elsewhere:4333",
        "--set",
        "log.level=debug",
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert (config["run"]["id"], config["run"]["seed"]) == ("from-file", 7)
    assert config["tools"]["actors_per_tool"] == 5
    assert config["nats"]["url"] == "nats://elsewhere:4333"
    assert config["log"]["level"] == "debug"
    assert set(config) >= {"run", "nats", "log", "tools"}


def test_print_config_needs_no_role_and_no_nats():
    result = run_script("mgrpo-node", "--print-config", "--run-id", "r-7")
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["run"]["id"] == "r-7"


def test_run_id_flag_is_taken_as_text():
    # `--run-id` is a string flag and these are valid run ids; they must not be re-parsed as YAML
    # (123 -> int, 2024-01-01 -> date, on -> True).
    wrong = []
    for run_id in ["123", "2024-01-01", "on", "1e3"]:
        result = run_script("mgrpo-node", "--print-config", "--run-id", run_id)
        if result.returncode != 0 or yaml.safe_load(result.stdout)["run"]["id"] != run_id:
            wrong.append(f"--run-id {run_id}: exit {result.returncode}: {result.stderr.strip()}")
    assert not wrong, "\n".join(wrong)


def test_version_prints_the_schema_and_packages():
    result = run_script("mgrpo-node", "--version")
    assert result.returncode == 0
    versions = yaml.safe_load(result.stdout)
    assert versions["schema"] == str(SCHEMA_VERSION) and "nats-py" in versions and "pykka" in versions


# ---- a running node -------------------------------------------------------------------------
@pytest.fixture
def tool_node(nats_server, run_id):
    """`mgrpo-node --role tool` on the module's nats-server, waited for until it answers pings."""
    proc = start_script(
        "mgrpo-node",
        "--role",
        "tool",
        "--nats",
        nats_server.url,
        "--run-id",
        run_id,
        "--name",
        "node-a",
        "--set",
        "tools.actors_per_tool=1",
        "--set",
        "tools.web_entities=200",
    )
    try:
        yield proc
    finally:
        stop_process(proc)


def _wait_for_answer(bus, proc, subject, message, timeout_s=60.0):
    answers: list = []

    def answered() -> bool:
        assert proc.poll() is None, f"node exited with {proc.returncode}: {proc.stderr.read()[-3000:]}"
        try:
            answers.append(bus.request(subject, message, timeout_s=1.0))
        except (NoResponders, RequestTimeout):
            return False
        return True

    wait_until(answered, timeout_s=timeout_s, interval_s=0.1, what=f"no answer on {subject}")
    return answers[-1]


def test_tool_node_answers_pings_and_tool_requests_then_stops_on_sigterm(tool_node, bus, venv_bin):
    info = _wait_for_answer(bus, tool_node, bus.subjects.node_ping, NodePing(requester="test"))
    assert isinstance(info, NodeInfo)
    assert info.node == "node-a" and info.roles == ["tool"] and info.pid == tool_node.pid

    result = _wait_for_answer(
        bus,
        tool_node,
        bus.subjects.tool("search"),
        ToolRequest(call_id="c1", tool="search", arguments={"query": "capital"}),
    )
    assert isinstance(result, ToolResult) and result.call_id == "c1"
    bad = bus.request(bus.subjects.tool("search"), ToolRequest(call_id="c2", tool="visit", arguments={}), timeout_s=5)
    assert bad.ok is False and bad.error  # a wrong call is an error result, not a lost request

    # `mgrpo ping` (another process) lists the node.
    ping = subprocess.run(
        [str(venv_bin("mgrpo")), "ping", "--nats", bus.url, "--run-id", bus.run_id, "--wait", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ping.returncode == 0, ping.stderr
    lines = [json.loads(line) for line in ping.stdout.splitlines() if line.strip()]
    assert [(n["node"], n["roles"], n["pid"]) for n in lines] == [("node-a", ["tool"], tool_node.pid)]
    assert lines[0]["versions"]["schema"] == str(SCHEMA_VERSION) and lines[0]["dead_letters"] == 0

    tool_node.send_signal(signal.SIGTERM)
    assert tool_node.wait(timeout=30) == 0, tool_node.stderr.read()[-3000:]

    # The node announced itself on the run's events subject, which the metrics stream keeps.
    events = _stored_events(bus)
    kinds = [e.kind for e in events if e.node == "node-a"]
    assert kinds == ["node.started", "node.stopped"], kinds


def _stored_events(bus) -> list[Event]:
    async def read() -> list[Event]:
        psub = await bus._js.pull_subscribe(bus.subjects.events, stream=bus.subjects.stream("metrics"))
        msgs = await psub.fetch(10, timeout=2)
        await psub.unsubscribe()
        return [decode(m.data) for m in msgs]

    return bus.call(read())


@pytest.mark.parametrize(
    "override, key",
    [("pipeline.levels=[9]", "pipeline.levels"), ("pipeline.queries_per_step=100000", "pipeline.queries_per_step")],
)
def test_a_dataset_that_cannot_fill_a_step_exits_2_naming_the_key_before_connecting(override, key):
    result = run_script(
        "mgrpo-node",
        "--role",
        "controller",
        "--set",
        override,
        "--set",
        "tools.web_entities=150",
        "--nats",
        closed_port_url(),
        timeout_s=60,
    )
    assert result.returncode == 2, result.stderr  # 3 would mean it tried NATS first
    assert key in result.stderr and "Traceback" not in result.stderr
