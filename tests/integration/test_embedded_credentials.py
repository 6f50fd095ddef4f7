"""The embedded server of a run admits the run's own user only (issue 23 #1): a node on it (the tool role,
the cheapest one, through the same `run_node(embedded=True)` as `mgrpo run`) works and `mgrpo ping` /
`mgrpo tap --run-dir` reach it as the run's user, while a client without credentials (raw nats-py, or tap
without --run-dir) or with a wrong password is refused; resumed, the run keeps its credentials and its
port; a credentials file looser than 0600 stops the resume with one line and exit 2."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from mgrpo_actors.runtime.run_credentials import credentials_path, load_run_credentials, run_credentials
from tests.helpers import REPO, run_script, stop_process, subprocess_env, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RUN_ID = "creds"
TOOLS = "tools.web_entities=100"  # the smallest synthetic web: the tool role starts in a second

# The node of `mgrpo-node --role all`, on its embedded server, with the tool role alone (no model loads).
NODE = """
import sys
from actors.node import run_node
from mgrpo_actors.config import NodeConfig, load_config
config = load_config(NodeConfig, None, sys.argv[2:])
sys.exit(run_node(config, ["tool"], "tool-node", embedded=True, duration_s=None, resume=sys.argv[1] == "resume"))
"""


def _start_node(tmp_path, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", NODE, mode, *(f"run.dir={tmp_path / 'runs'}", f"run.id={RUN_ID}", TOOLS)],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def _ping(run_dir, *extra: str) -> subprocess.CompletedProcess:
    return run_script("mgrpo", "ping", "--run-id", RUN_ID, "--wait", "0.5", *extra, "--run-dir", str(run_dir))


def _node_answers(node: subprocess.Popen, run_dir) -> bool:
    assert node.poll() is None, f"node exited {node.returncode}: {node.stderr.read()[-2000:]}"
    path = credentials_path(run_dir)
    if not path.exists() or not load_run_credentials(path).url:
        return False
    return _ping(run_dir).returncode == 0


def _command_lines_with(secret: str) -> list[str]:
    """The processes whose command line holds `secret` (the node and its nats-server must not be among them)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if secret.encode() in cmdline.read_bytes():
                found.append(str(cmdline))
        except OSError:  # gone meanwhile
            pass
    return found


async def _raw_connect(url: str, **auth: str) -> None:
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2, max_reconnect_attempts=0, **auth)
    await nc.close()


def test_only_the_runs_own_user_gets_in_and_a_resume_keeps_it(tmp_path):
    run_dir = tmp_path / "runs" / RUN_ID
    node = _start_node(tmp_path, "fresh")
    try:
        wait_until(lambda: _node_answers(node, run_dir), timeout_s=60, interval_s=0.3, what="the node never answered")
        credentials = load_run_credentials(credentials_path(run_dir))
        for path in (credentials_path(run_dir), run_dir / "nats" / "nats.conf"):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert credentials.password not in (run_dir / "nats" / "nats.conf").read_text()
        assert credentials.password not in (run_dir / "nats" / "nats-server.log").read_text()
        # Nobody else: no credentials, or the run's user with a wrong password.
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            asyncio.run(_raw_connect(credentials.url))
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            asyncio.run(_raw_connect(credentials.url, user=credentials.user, password="guessed"))
        refused = run_script("mgrpo", "tap", "--nats", credentials.url, "--duration", "0.1")
        assert refused.returncode == 3 and "refused the credentials of no user" in refused.stderr
        # The run's clients: the node (it answers pings over NATS), ping and tap as the run's user.
        assert '"node": "tool-node"' in _ping(run_dir).stdout
        tapped = run_script("mgrpo", "tap", f"mgrpo.{RUN_ID}.>", "--duration", "0.1", "--run-dir", str(run_dir))
        assert tapped.returncode == 0, tapped.stderr
        assert not _command_lines_with(credentials.password)
        node.terminate()
        out, err = node.communicate(timeout=30)
        log = out + err  # structlog's lines (on stdout: the script configures no logging) and errors
        assert node.returncode == 0, log[-2000:]
        assert credentials.password not in log and credentials.url in log  # the URL is logged, the password never

        resumed = _start_node(tmp_path, "resume")
        try:
            wait_until(lambda: _node_answers(resumed, run_dir), timeout_s=60, interval_s=0.3, what="no resumed node")
            assert load_run_credentials(credentials_path(run_dir)) == credentials  # same user, password and port
        finally:
            stop_process(resumed)
    finally:
        stop_process(node)


def test_a_resume_with_a_credentials_file_looser_than_0600_exits_2_in_one_line(tmp_path):
    run_dir = tmp_path / "runs" / RUN_ID
    run_credentials(run_dir)  # what the earlier start left (0600), then loosened
    os.chmod(credentials_path(run_dir), 0o644)
    resumed = _start_node(tmp_path, "resume")
    _, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 2
    assert err.strip().splitlines() == [
        f"mgrpo-node: error: {credentials_path(run_dir)} has mode 0644, looser than 0600 (others may have read the "
        "run's password): chmod 600 it if nobody did, or delete it and start the run afresh"
    ]
    assert not (run_dir / "nats").exists()  # refused before the server started
