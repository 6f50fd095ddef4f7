"""The per-run user of an embedded server (runtime/run_credentials.py): its file is created mode 0600 even
under a permissive umask, reused as it is, refused when looser than 0600, a link or malformed; the server
config gets only a bcrypt hash; a joining node uses it only for the server it names. No network."""

from __future__ import annotations

import json
import os
import stat

import bcrypt
import pytest

from mgrpo_actors.runtime.run_credentials import (
    CREDENTIALS_FILE,
    RunCredentials,
    RunCredentialsError,
    credentials_path,
    load_run_credentials,
    matching_run_credentials,
    run_credentials,
    same_servers,
    save_run_credentials,
)


def _mode(path) -> int:  # noqa: ANN001
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def permissive_umask():
    """umask 0: whatever mode the code asks for is what the file gets (no help from a strict umask)."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_a_fresh_run_gets_random_credentials_in_a_0600_file(tmp_path, permissive_umask):
    first = run_credentials(tmp_path / "r1")
    path = tmp_path / "r1" / CREDENTIALS_FILE
    assert credentials_path(tmp_path / "r1") == path and _mode(path) == 0o600
    assert _mode(tmp_path / "r1") == 0o700  # the run directory too: store, checkpoints, server log
    assert json.loads(path.read_text()) == {"user": first.user, "password": first.password, "url": ""}
    assert len(first.password) >= 40 and first.user.startswith("run-")
    other = run_credentials(tmp_path / "r2")
    assert other.user != first.user and other.password != first.password
    assert first.password not in repr(first) and first.password not in repr(first.security())


def test_a_resumed_run_reuses_its_file_and_saving_the_url_keeps_user_password_and_mode(tmp_path, permissive_umask):
    first = run_credentials(tmp_path)
    save_run_credentials(credentials_path(tmp_path), first.with_url("nats://127.0.0.1:4321"))
    again = run_credentials(tmp_path)
    assert (again.user, again.password, again.url) == (first.user, first.password, "nats://127.0.0.1:4321")
    assert _mode(credentials_path(tmp_path)) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [CREDENTIALS_FILE]  # no temporary file left


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606])
def test_a_file_looser_than_0600_is_refused_naming_its_mode(tmp_path, mode):
    run_credentials(tmp_path)
    os.chmod(credentials_path(tmp_path), mode)
    with pytest.raises(RunCredentialsError, match=f"mode {mode:04o}, looser than 0600") as refused:
        run_credentials(tmp_path)
    assert "\n" not in str(refused.value) and str(credentials_path(tmp_path)) in str(refused.value)


def test_a_stricter_file_is_fine(tmp_path):
    first = run_credentials(tmp_path)
    os.chmod(credentials_path(tmp_path), 0o400)
    assert run_credentials(tmp_path) == first


@pytest.mark.parametrize(
    "content",
    [
        "",
        "not json",
        "[]",
        '{"user": "u"}',
        '{"user": "", "password": "p"}',
        '{"user": "u", "password": 3}',
        '{"user": "u", "password": "p", "url": 1}',
        b"\xff\xfe",
    ],
)
def test_a_malformed_file_is_refused(tmp_path, content):
    path = credentials_path(tmp_path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, content if isinstance(content, bytes) else content.encode())
    os.close(fd)
    with pytest.raises(RunCredentialsError, match="is malformed") as refused:
        load_run_credentials(path)
    assert "\n" not in str(refused.value)


def test_a_link_is_refused_even_to_a_private_file(tmp_path):
    save_run_credentials(tmp_path / "elsewhere.json", RunCredentials("u", "p"))
    os.symlink(tmp_path / "elsewhere.json", credentials_path(tmp_path))
    with pytest.raises(RunCredentialsError, match="not a regular file"):
        run_credentials(tmp_path)


def test_a_missing_file_says_the_server_has_not_started(tmp_path):
    with pytest.raises(RunCredentialsError, match="does not exist"):
        load_run_credentials(credentials_path(tmp_path))


def test_the_server_config_gets_a_bcrypt_hash_and_never_the_password():
    credentials = RunCredentials("run-x", "s3cret-password")
    block = credentials.server_authorization()
    assert "s3cret-password" not in block and 'user: "run-x"' in block
    hashed = block.split('password: "')[1].split('"')[0]
    assert hashed.startswith("$2b$10$") and bcrypt.checkpw(b"s3cret-password", hashed.encode())


def test_same_servers_compares_host_and_port_of_every_server():
    assert same_servers("nats://127.0.0.1:4321", "127.0.0.1:4321")
    assert same_servers("nats://localhost:4321", "nats://127.0.0.1:4321")
    assert same_servers("nats://a:1,nats://b:2", "nats://b:2, nats://a:1")
    assert not same_servers("nats://127.0.0.1:4321", "nats://127.0.0.1:4322")
    assert not same_servers("nats://127.0.0.1:4321", "nats://10.0.0.1:4321")
    assert not same_servers("", "") and not same_servers("nats://127.0.0.1:4321", "")


def test_a_joining_node_gets_the_credentials_only_for_the_server_they_name(tmp_path):
    assert matching_run_credentials(tmp_path, "nats://127.0.0.1:4321") is None  # no file: no run here
    credentials = RunCredentials("u", "p", "nats://127.0.0.1:4321")
    save_run_credentials(credentials_path(tmp_path), credentials)
    assert matching_run_credentials(tmp_path, "nats://localhost:4321") == credentials
    assert matching_run_credentials(tmp_path, "nats://nats.example:4321") is None  # never sent elsewhere
    os.chmod(credentials_path(tmp_path), 0o644)
    with pytest.raises(RunCredentialsError, match="looser than 0600"):
        matching_run_credentials(tmp_path, "nats://127.0.0.1:4321")
    # a node bound for another server is not stopped by a file it would never use, however it is kept
    assert matching_run_credentials(tmp_path, "nats://nats.example:4321") is None
