"""The monitor role's exports (issue 11): with `monitor.prometheus_port` it serves the run's metrics for
Prometheus, with `monitor.tensorboard_dir` it writes them as TensorBoard scalars; a real monitor node,
fed from a real nats-server's metrics stream, scraped over HTTP and its event files read back."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from mgrpo_actors.monitoring.publish import RUN_FINISHED, publish_event, publish_metrics
from tests.helpers import start_script, stop_process, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> str:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return ""


def test_the_monitor_serves_prometheus_metrics_and_writes_tensorboard_scalars(nats_server, bus, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    bus.ensure_streams(["metrics"])
    for step, reward in enumerate((0.25, 0.5)):
        publish_metrics(bus, "main", {"reward_mean": reward}, step, "main-aligner")
    publish_metrics(bus, "sub", {"dk_hist": 4}, 1, "sub-aligner", tags={"dk": "3"})  # a tagged sample keeps its tags
    bus.flush()
    port, logdir = _free_port(), tmp_path / "tb"
    node = start_script(
        "mgrpo-node",
        "--role",
        "monitor",
        "--until-finished",
        "--nats",
        nats_server.url,
        "--run-id",
        bus.run_id,
        "--set",
        f"run.dir={tmp_path}",
        "--set",
        f"monitor.prometheus_port={port}",
        "--set",
        "monitor.prometheus_addr=127.0.0.1",
        "--set",
        f"monitor.tensorboard_dir={logdir}",
        stdout=open(tmp_path / "monitor.log", "w"),
    )
    try:
        line = f'mgrpo_main_reward_mean{{node="{bus.node}",role="main-aligner",run="{bus.run_id}",tags=""}} 0.5'
        wait_until(
            lambda: line in _scrape(port),
            timeout_s=60,
            interval_s=0.5,
            what=lambda: _scrape(port)[-1500:] + (tmp_path / "monitor.log").read_text()[-1500:],
        )
        assert f'mgrpo_step{{run="{bus.run_id}"}} 1.0' in _scrape(port)
        assert (
            f'mgrpo_sub_dk_hist{{node="{bus.node}",role="sub-aligner",run="{bus.run_id}",tags="dk=3"}} 4.0'
            in _scrape(port)
        )
        publish_event(bus, RUN_FINISHED, "done", "controller")
        assert node.wait(30) == 0
    finally:
        stop_process(node)
    (run_dir,) = logdir.iterdir()  # one directory per monitor start
    assert run_dir.name.startswith(f"{bus.run_id}-")
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("main/reward_mean")] == [(0, 0.25), (1, 0.5)]
    assert [(e.step, e.value) for e in events.Scalars("sub/dk_hist/dk=3")] == [(1, 4.0)]
