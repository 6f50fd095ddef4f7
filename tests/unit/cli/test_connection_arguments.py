"""Whom `mgrpo tap` / `mgrpo ping` connect as (mgrpo_actors/cli/arguments.py `connection`): `--run-dir` gives a
run's embedded server and its user; `ping --run-id` alone finds a local run's; a --config user and
--run-dir together are refused; without any, nothing changes. No network."""

from __future__ import annotations

import argparse
import os

import pytest

from mgrpo_actors.cli.arguments import DEFAULT_URL, add_connection_arguments, connection
from mgrpo_actors.runtime.run_credentials import RunCredentials, credentials_path, save_run_credentials

URL = "nats://127.0.0.1:45678"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_connection_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture
def run_dir(tmp_path):
    path = tmp_path / "runs" / "r1"
    save_run_credentials(credentials_path(path), RunCredentials("run-u", "run-pw", URL))
    return path


def test_run_dir_gives_the_servers_url_and_the_runs_user(run_dir):
    url, security, _ = connection(_args("--run-dir", str(run_dir)))
    assert url == URL and (security.user, security.password) == ("run-u", "run-pw")
    url, _, _ = connection(_args("--run-dir", str(run_dir), "--nats", "nats://127.0.0.1:1"))
    assert url == "nats://127.0.0.1:1"  # --nats wins over the recorded URL


def test_run_dir_refuses_a_loose_file_and_a_config_user(run_dir, tmp_path):
    (tmp_path / "pw").write_text("x\n")
    config = tmp_path / "tap.yaml"
    config.write_text(f"nats: {{auth: {{user: tap, password_file: {tmp_path / 'pw'}}}}}\n")
    with pytest.raises(ValueError, match="not both"):
        connection(_args("--run-dir", str(run_dir), "--config", str(config)))
    os.chmod(credentials_path(run_dir), 0o640)
    with pytest.raises(ValueError, match="looser than 0600"):
        connection(_args("--run-dir", str(run_dir)))


def test_a_run_whose_server_never_started_needs_nats(tmp_path):
    save_run_credentials(credentials_path(tmp_path), RunCredentials("u", "p"))
    with pytest.raises(ValueError, match="give --nats"):
        connection(_args("--run-dir", str(tmp_path)))


def test_ping_finds_a_local_runs_server_by_its_id_alone(run_dir, monkeypatch):
    monkeypatch.chdir(run_dir.parent.parent)  # runs/ (the default run.dir) is here
    url, security, _ = connection(_args(), run_id="r1")
    assert url == URL and security.user == "run-u"
    url, security, _ = connection(_args(), run_id="other")  # no such run here: the default, as before
    assert url == DEFAULT_URL and security is None
    url, security, _ = connection(_args("--nats", "nats://127.0.0.1:2"), run_id="r1")  # a given URL is not overridden
    assert url == "nats://127.0.0.1:2" and security is None
