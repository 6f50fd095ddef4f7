"""Who a node is on NATS and how its connection is protected: `nats.auth` / `nats.tls` validation and
secrets read from files or variables, `connect_security`, connection errors said in words (the
messages measured with Python's ssl module and nats-server), the plain-text refusal, and the
development CA of `mgrpo deploy certs`. No network."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import ssl
import stat

import nats.errors
import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_actors.config.nats_security import NatsAuthConfig, NatsTlsConfig, connect_security
from mgrpo_actors.deploy.certs import make_certificates
from mgrpo_actors.runtime.security import ConnectSecurity, explain_connect_error, names_cause, plaintext_refusal


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certs"), ["127.0.0.1", "localhost"], ["tool"])


def _load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---- NatsAuthConfig / NatsTlsConfig -----------------------------------------------------------------


@pytest.fixture
def password_file(tmp_path):
    path = tmp_path / "node.password"
    path.write_text("  s3cret-pw  \nsecond line\n")
    return path


def test_no_auth_is_the_default():
    """Empty user, no password, nats-py's inbox prefix."""
    auth = NatsAuthConfig()
    assert auth.user == "" and auth.password() == "" and auth.inbox_prefix == "_INBOX"


def test_password_is_the_stripped_first_line_of_the_file(password_file):
    """Only the first line counts, without surrounding blanks."""
    assert NatsAuthConfig(user="tool", password_file=str(password_file)).password() == "s3cret-pw"


@pytest.mark.parametrize("content", ["", "\n", "   \nsecond\n"])
def test_an_empty_password_file_is_refused_when_read(tmp_path, content):
    """An empty file (or blank first line) is an error naming the file, not an empty password."""
    path = tmp_path / "empty.password"
    path.write_text(content)
    auth = NatsAuthConfig(user="tool", password_file=str(path))
    with pytest.raises(ValueError, match="is empty"):
        auth.password()


def test_password_from_an_environment_variable(monkeypatch):
    """password_env: read from the variable when asked."""
    monkeypatch.setenv("MGRPO_TEST_PW", "from-env")
    assert NatsAuthConfig(user="tool", password_env="MGRPO_TEST_PW").password() == "from-env"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"user": "tool"}, "needs nats.auth.password_file or nats.auth.password_env"),
        ({"password_env": "HOME"}, "a password needs nats.auth.user"),
        ({"user": "tool", "password_file": "PWFILE", "password_env": "HOME"}, "not both"),
        ({"user": "tool", "password_file": "/nonexistent/pw"}, "is not a file"),
        ({"inbox_prefix": "replies"}, "must be _INBOX or start with '_INBOX.'"),
        ({"inbox_prefix": "_INBOXtool"}, "must be _INBOX or start with '_INBOX.'"),
        ({"inbox_prefix": "_INBOX.tool.*"}, "not a subject prefix"),
        ({"inbox_prefix": "_INBOX.tool."}, "not a subject prefix"),
        ({"inbox_prefix": "_INBOX.a b"}, "not a subject prefix"),
    ],
)
def test_invalid_auth_is_refused_naming_the_key(kwargs, message, password_file):
    """No user without a password source and vice versa, one source only, a real file, an `_INBOX.` prefix."""
    kwargs = {k: str(password_file) if v == "PWFILE" else v for k, v in kwargs.items()}
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("*", r"\*")):
        NatsAuthConfig(**kwargs)


def test_a_directory_is_not_a_password_file(tmp_path):
    """The file must be a regular file."""
    with pytest.raises(ValueError, match="nats.auth.password_file: .* is not a file"):
        NatsAuthConfig(user="tool", password_file=str(tmp_path))


@pytest.mark.parametrize("value", [None, ""])
def test_an_unset_or_empty_password_variable_is_refused(monkeypatch, value):
    """The variable is checked when the config loads, not when connecting."""
    if value is None:
        monkeypatch.delenv("MGRPO_TEST_PW", raising=False)
    else:
        monkeypatch.setenv("MGRPO_TEST_PW", value)
    with pytest.raises(ValueError, match="MGRPO_TEST_PW is not set or empty"):
        NatsAuthConfig(user="tool", password_env="MGRPO_TEST_PW")


def test_a_user_inbox_prefix_is_accepted():
    """`_INBOX.<user>` (what nats-config renders) and deeper prefixes are fine."""
    assert NatsAuthConfig(inbox_prefix="_INBOX.tool").inbox_prefix == "_INBOX.tool"
    assert NatsAuthConfig(inbox_prefix="_INBOX.tool.node-1").inbox_prefix == "_INBOX.tool.node-1"


def test_tls_refuses_a_certificate_without_its_key_and_missing_files(certs, tmp_path):
    """cert_file and key_file go together; every named file must exist."""
    client_cert, client_key = certs.clients["tool"]
    with pytest.raises(ValueError, match="cert_file and key_file go together"):
        NatsTlsConfig(cert_file=str(client_cert))
    with pytest.raises(ValueError, match="cert_file and key_file go together"):
        NatsTlsConfig(key_file=str(client_key))
    with pytest.raises(ValueError, match="nats.tls.ca_file: .* is not a file"):
        NatsTlsConfig(ca_file=str(tmp_path / "missing.pem"))


def test_tls_context_loads_the_ca_and_the_client_certificate(certs):
    """A verifying TLS >= 1.2 client context; a certificate with the wrong key is refused in words."""
    client_cert, client_key = certs.clients["tool"]
    tls = NatsTlsConfig(ca_file=str(certs.ca), cert_file=str(client_cert), key_file=str(client_key))
    context = tls.context()
    assert tls.enabled and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(ValueError, match="are not a certificate and its key"):
        NatsTlsConfig(cert_file=str(client_cert), key_file=str(certs.server_key)).context()
    assert not NatsTlsConfig().enabled


def test_connect_security_is_none_for_a_plain_url_without_auth():
    """Nothing configured and nats:// URLs: connect as nats-py would by default."""
    assert connect_security("nats://127.0.0.1:4222", NatsAuthConfig(), NatsTlsConfig()) is None
    assert connect_security("nats://a:1, nats://b:2", NatsAuthConfig(), NatsTlsConfig()) is None


def test_connect_security_turns_tls_on_for_a_tls_url(certs, password_file):
    """A tls:// URL (any of several) switches TLS on; user, password and inbox reach `nats.connect`."""
    auth = NatsAuthConfig(user="tool", password_file=str(password_file), inbox_prefix="_INBOX.tool")
    security = connect_security(
        "nats://a:1, tls://127.0.0.1:4222", auth, NatsTlsConfig(ca_file=str(certs.ca), hostname="localhost")
    )
    assert isinstance(security.tls, ssl.SSLContext) and security.ca_file == str(certs.ca)
    assert security.nats_options() == {
        "inbox_prefix": "_INBOX.tool",
        "user": "tool",
        "password": "s3cret-pw",
        "tls": security.tls,
        "tls_hostname": "localhost",
        "tls_handshake_first": True,
    }
    plain_start = connect_security(
        "tls://127.0.0.1:4222", auth, NatsTlsConfig(ca_file=str(certs.ca), handshake_first=False)
    )
    assert "tls_handshake_first" not in plain_start.nats_options()
    # the system's CA store
    assert connect_security("tls://127.0.0.1:4222", NatsAuthConfig(), NatsTlsConfig()).tls is not None


def test_connect_security_without_tls_keeps_only_the_inbox_prefix():
    """A user inbox on a plain URL: a ConnectSecurity without TLS or credentials."""
    security = connect_security("nats://127.0.0.1:4222", NatsAuthConfig(inbox_prefix="_INBOX.tap"), NatsTlsConfig())
    assert security.tls is None and security.nats_options() == {"inbox_prefix": "_INBOX.tap"}


@given(st.text(min_size=1))
def test_connect_security_repr_never_shows_the_password(password):
    """repr (and so str, logs, tracebacks) does not depend on the password, only on whether one is set."""
    security = ConnectSecurity(user="tool", password=password)
    assert repr(security) == repr(dataclasses.replace(security, password="other")) == str(security)
    assert "'***'" in repr(security)


# ---- explain_connect_error / names_cause / plaintext_refusal ----------------------------------------

_EXPIRED = ssl.SSLCertVerificationError(
    "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate has expired (_ssl.c:1006)"
)
_WRONG_CA = ssl.SSLCertVerificationError(
    "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate (_ssl.c:1006)"
)
_WRONG_HOST = ssl.SSLCertVerificationError(
    "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: Hostname mismatch, "
    "certificate is not valid for 'x'. (_ssl.c:1006)"
)
_NO_CLIENT_CERT = ssl.SSLError(
    "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required (_ssl.c:2580)"
)
_BAD_PASSWORD = nats.errors.Error("nats: 'Authorization Violation'")
_KNOWN = [
    (_EXPIRED, "has expired"),
    (_WRONG_CA, "wrong CA"),
    (_WRONG_HOST, "not valid for the host"),
    (_NO_CLIENT_CERT, "client certificate"),
    (_BAD_PASSWORD, "wrong user or password"),
]


@pytest.mark.parametrize(("exc", "cause"), _KNOWN)
def test_known_connect_errors_are_explained_and_keep_the_original(exc, cause):
    """Each measured failure gets its cause in words, followed by the exception itself."""
    text = explain_connect_error(exc, None)
    assert cause in text and f"{type(exc).__name__}: " in text
    assert names_cause(exc)


def test_the_wrong_ca_message_names_the_ca_file_or_the_system_store():
    """With nats.tls.ca_file set it is named; without, the system store is."""
    assert "nats.tls.ca_file (/etc/ca.pem)" in explain_connect_error(_WRONG_CA, ConnectSecurity(ca_file="/etc/ca.pem"))
    assert "system's CA store" in explain_connect_error(_WRONG_CA, None)


def test_a_credentials_failure_names_the_user_but_not_the_password():
    """The user is named (or its absence); the password never appears."""
    text = explain_connect_error(_BAD_PASSWORD, ConnectSecurity(user="tool", password="hunter2-pw"))
    assert "user 'tool'" in text and "hunter2-pw" not in text
    assert "no user" in explain_connect_error(_BAD_PASSWORD, None)


def test_other_tls_errors_are_a_generic_handshake_failure():
    """An unrecognised ssl.SSLError still says TLS failed."""
    exc = ssl.SSLError("[SSL: SSLV3_ALERT_HANDSHAKE_FAILURE] sslv3 alert handshake failure (_ssl.c:1006)")
    assert explain_connect_error(exc, None).startswith("TLS handshake failed") and names_cause(exc)


def test_a_handshake_first_client_meeting_a_plain_server_says_so():
    """TLS first against a plain-text server (measured: WRONG_VERSION_NUMBER): nothing was sent."""
    exc = ssl.SSLError("[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")
    assert "does not speak TLS" in explain_connect_error(exc, None) and names_cause(exc)
    silent = Exception("nats: empty response from server when expecting INFO message")
    assert "handshake_first" in explain_connect_error(silent, None)


@pytest.mark.parametrize(
    "exc",
    [OSError("connection reset"), ConnectionRefusedError(111, "Connection refused"), BrokenPipeError(), TimeoutError()],
)
def test_unrelated_errors_are_unchanged_and_name_no_cause(exc):
    """What follows a failure (a broken pipe, a refused or timed-out connect) is passed through as is."""
    assert explain_connect_error(exc, ConnectSecurity(user="u", password="p")) == f"{type(exc).__name__}: {exc}".rstrip(
        ": "
    )
    assert not names_cause(exc)


class _FakeClient:
    def __init__(self, info):
        self._server_info = info


def test_plaintext_refusal_only_when_tls_was_asked_and_the_server_lacks_it():
    """TLS asked and the server's INFO lacks tls_required: refuse; every other case: ""."""
    with_tls, without_tls = ConnectSecurity(tls=ssl.create_default_context()), ConnectSecurity(user="u", password="p")
    assert "does not speak TLS" in plaintext_refusal(_FakeClient({}), with_tls)
    assert "does not speak TLS" in plaintext_refusal(_FakeClient({"tls_required": False}), with_tls)
    assert "does not speak TLS" in plaintext_refusal(object(), with_tls)  # no INFO at all
    assert plaintext_refusal(_FakeClient({"tls_required": True}), with_tls) == ""
    for security in (without_tls, None):
        assert plaintext_refusal(_FakeClient({}), security) == ""
        assert plaintext_refusal(_FakeClient({"tls_required": True}), security) == ""


# ---- make_certificates ----------------------------------------------------------------------------


def test_certificates_are_written_with_private_keys(certs):
    """CA, server and client certificate with their keys; keys mode 0600."""
    for path in (certs.ca, certs.ca_key, certs.server, certs.server_key, *certs.clients["tool"]):
        assert path.is_file() and path.stat().st_size > 0
    assert [p.name for p in certs.clients["tool"]] == ["tool.pem", "tool-key.pem"]
    for key in (certs.ca_key, certs.server_key, certs.clients["tool"][1]):
        assert _mode(key) == 0o600, key


def test_the_server_certificate_carries_every_host_and_the_ca_signed_it(certs):
    """SAN: the IP as an IP, the name as a DNS name; issued and signed by the CA; server and client auth."""
    ca, server = _load(certs.ca), _load(certs.server)
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert server.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "127.0.0.1"
    server.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usages = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages and ExtendedKeyUsageOID.CLIENT_AUTH in usages


def test_the_client_certificate_is_for_client_auth_and_signed_by_the_ca(certs):
    """A client certificate named after the client, client auth only."""
    client = _load(certs.clients["tool"][0])
    client.verify_directly_issued_by(_load(certs.ca))
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "tool"
    assert list(client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH
    ]


def test_validity_window_follows_days_and_not_before(tmp_path):
    """Valid from not_before less a minute, for `days`: a past start with few days is expired."""
    start = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    made = make_certificates(tmp_path, ["localhost"], days=2, not_before=start)
    for path in (made.ca, made.server):
        cert = _load(path)
        assert cert.not_valid_before_utc == start - datetime.timedelta(minutes=1)
        assert cert.not_valid_after_utc == start - datetime.timedelta(minutes=1) + datetime.timedelta(days=2)


def test_another_ca_does_not_verify_the_server(certs, tmp_path):
    """A second set's CA did not sign the first set's server certificate."""
    other = make_certificates(tmp_path, ["127.0.0.1"])
    with pytest.raises(InvalidSignature):  # same CA name, another key
        _load(certs.server).verify_directly_issued_by(_load(other.ca))


def test_an_existing_key_file_is_made_private(tmp_path):
    """A key file that existed with wider permissions ends mode 0600."""
    (tmp_path / "server-key.pem").write_text("old")
    (tmp_path / "server-key.pem").chmod(0o644)
    made = make_certificates(tmp_path, ["127.0.0.1"])
    assert _mode(made.server_key) == 0o600 and b"PRIVATE KEY" in made.server_key.read_bytes()


@pytest.mark.parametrize(
    ("hosts", "clients", "message"),
    [
        ([], [], "at least one host"),
        (["h"], [""], "cannot be a file name"),
        (["h"], ["a/b"], "cannot be a file name"),
        (["h"], [".hidden"], "cannot be a file name"),
    ],
)
def test_no_hosts_or_a_bad_client_name_is_refused_before_writing(tmp_path, hosts, clients, message):
    """Refused with nothing written."""
    with pytest.raises(ValueError, match=message):
        make_certificates(tmp_path / "out", hosts, clients)
    assert not (tmp_path / "out").exists()
