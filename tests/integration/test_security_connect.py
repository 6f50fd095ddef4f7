"""TLS and credentials on a real nats-server (issue 11): a node configured with a CA, a user and a
password file connects and serves; a wrong CA, an expired server certificate, a wrong password or a
server without TLS make it exit 3 naming the cause; a missing password file exits 2 before connecting.
The certificates come from `mgrpo_actors.deploy.certs` (what `mgrpo deploy certs` writes)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
import yaml

from mgrpo_actors.deploy.certs import make_certificates
from mgrpo_actors.runtime import EmbeddedNats
from tests.helpers import run_script, start_script, stop_process, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PASSWORD = "correct horse battery staple"


def _tls_server(certs, users: bool = True) -> EmbeddedNats:  # noqa: ANN001
    tls = (
        f"tls {{ cert_file: {json.dumps(str(certs.server))}, key_file: {json.dumps(str(certs.server_key))}, "
        f"timeout: 2, handshake_first: true }}\n"
    )
    auth = f"authorization {{ users: [ {{ user: tool, password: {json.dumps(PASSWORD)} }} ] }}\n" if users else ""
    return EmbeddedNats(extra_config=tls + auth).start()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    good = make_certificates(root / "good", ["127.0.0.1", "localhost"])
    other = make_certificates(root / "other", ["127.0.0.1"])
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    expired = make_certificates(root / "expired", ["127.0.0.1"], days=1, not_before=long_ago)
    (root / "password").write_text(PASSWORD + "\n")
    (root / "wrong-password").write_text("not it\n")
    return {"root": root, "good": good, "other": other, "expired": expired}


def _config(tmp_path: Path, pki, ca: Path, password_file: str = "password") -> Path:  # noqa: ANN001
    path = tmp_path / "node.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "nats": {
                    "auth": {"user": "tool", "password_file": str(pki["root"] / password_file)},
                    "tls": {"ca_file": str(ca)},
                    "connect_timeout_s": 2,
                },
                "tools": {"web_entities": 100},
            }
        )
    )
    return path


def _node_fails(url: str, config: Path) -> tuple[int, str]:
    result = run_script(
        "mgrpo-node", "--role", "tool", "--nats", url, "--config", str(config), "--run-id", "sec", timeout_s=60
    )
    return result.returncode, result.stderr[-2000:]


def test_a_node_with_ca_user_and_password_file_connects_and_answers_over_tls(pki, tmp_path):
    server = _tls_server(pki["good"])
    url = server.url.replace("nats://", "tls://")
    config = _config(tmp_path, pki, pki["good"].ca)
    node = start_script(
        "mgrpo-node",
        "--role",
        "tool",
        "--nats",
        url,
        "--config",
        str(config),
        "--run-id",
        "sec",
        "--name",
        "secure-tool",
    )
    try:

        def answered() -> bool:
            result = run_script(
                "mgrpo", "ping", "--config", str(config), "--nats", url, "--run-id", "sec", timeout_s=30
            )
            return result.returncode == 0 and "secure-tool" in result.stdout

        wait_until(answered, timeout_s=60, interval_s=0.5, what="the TLS tool node never answered mgrpo ping")
        plain = run_script("mgrpo", "ping", "--nats", server.url, "--run-id", "sec", timeout_s=30)  # no CA, no user
        assert plain.returncode == 3 and "TLS" in plain.stderr, plain.stderr
    finally:
        stop_process(node)
        server.stop()


@pytest.mark.parametrize("case", ["wrong CA", "expired certificate", "wrong password", "server without TLS"])
def test_a_node_that_cannot_connect_securely_exits_3_naming_the_cause(pki, tmp_path, case):
    expected = {
        "wrong CA": "wrong CA",
        "expired certificate": "has expired",
        "wrong password": "wrong user or password",
        "server without TLS": "does not speak TLS",
    }[case]
    server = (
        _tls_server(pki["expired"] if case == "expired certificate" else pki["good"], users=True)
        if case != "server without TLS"
        else EmbeddedNats().start()
    )
    try:
        ca = {"wrong CA": pki["other"].ca, "expired certificate": pki["expired"].ca}.get(case, pki["good"].ca)
        config = _config(tmp_path, pki, ca, "wrong-password" if case == "wrong password" else "password")
        code, stderr = _node_fails(server.url.replace("nats://", "tls://"), config)
        assert code == 3, stderr
        assert expected in stderr, stderr
    finally:
        server.stop()


def test_a_missing_password_file_exits_2_before_connecting(pki, tmp_path):
    config = _config(tmp_path, pki, pki["good"].ca, password_file="no-such-file")
    code, stderr = _node_fails("tls://127.0.0.1:1", config)
    assert code == 2 and "nats.auth.password_file" in stderr and "is not a file" in stderr, stderr
