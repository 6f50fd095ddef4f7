"""`nats.auth` and `nats.tls`: who a node is on NATS and how its connection is protected.

Secrets come from files or environment variables that the config names, never from the config itself
or the command line (they would show in `ps`, shell history and logs). Checked before connecting: a
missing file, an unset variable, a certificate without its key exit 2 naming the key.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from mgrpo_actors.runtime.security import DEFAULT_INBOX_PREFIX, ConnectSecurity

__all__ = ["NatsAuthConfig", "NatsTlsConfig", "connect_security"]


def _readable_file(key: str, path: str) -> Path:
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"{key}: {path} is not a file")
    try:
        with open(file, "rb"):
            pass
    except OSError as exc:
        raise ValueError(f"{key}: cannot read {path}: {exc.strerror}") from None
    return file


@dataclass(frozen=True)
class NatsAuthConfig:
    """The NATS user of this node (deploy/nats/ makes one per role)."""

    user: str = ""
    """NATS user name; empty = connect without credentials"""
    password_file: str = ""
    """file whose first line is the password (keep it mode 0600)"""
    password_env: str = ""
    """or: the environment variable holding the password"""
    inbox_prefix: str = DEFAULT_INBOX_PREFIX
    """replies come back on <prefix>.<random>; "_INBOX.<user>" lets the server keep users off each other's replies"""

    def __post_init__(self) -> None:
        if self.password_file and self.password_env:
            raise ValueError("nats.auth: set password_file or password_env, not both")
        if (self.password_file or self.password_env) and not self.user:
            raise ValueError("nats.auth: a password needs nats.auth.user")
        if self.user and not (self.password_file or self.password_env):
            raise ValueError(
                f"nats.auth.user {self.user!r} needs nats.auth.password_file or nats.auth.password_env "
                "(passwords never go on the command line)"
            )
        if self.password_file:
            _readable_file("nats.auth.password_file", self.password_file)
        if self.password_env and not os.environ.get(self.password_env):
            raise ValueError(
                f"nats.auth.password_env: the environment variable {self.password_env} is not set or empty"
            )
        if self.inbox_prefix != DEFAULT_INBOX_PREFIX and not self.inbox_prefix.startswith(f"{DEFAULT_INBOX_PREFIX}."):
            raise ValueError(
                f"nats.auth.inbox_prefix must be {DEFAULT_INBOX_PREFIX} or start with '{DEFAULT_INBOX_PREFIX}.' "
                f"(nodes answer only inboxes), got {self.inbox_prefix!r}"
            )
        if any(c in self.inbox_prefix for c in " *>\t\r\n") or self.inbox_prefix.endswith("."):
            raise ValueError(
                f"nats.auth.inbox_prefix {self.inbox_prefix!r} is not a subject prefix "
                "(no spaces or wildcards, no trailing dot)"
            )

    def password(self) -> str:
        """Read the password now (first line of the file, or the variable)."""
        if self.password_file:
            lines = Path(self.password_file).expanduser().read_text(encoding="utf-8").splitlines()
            if not lines or not lines[0].strip():
                raise ValueError(f"nats.auth.password_file: {self.password_file} is empty")
            return lines[0].strip()
        return os.environ.get(self.password_env, "") if self.password_env else ""


@dataclass(frozen=True)
class NatsTlsConfig:
    """TLS of this node's connection (on when `ca_file` is set or the URL is tls://)."""

    ca_file: str = ""
    """PEM of the CA that signed the servers' certificates ("" = the system's CA store)"""
    cert_file: str = ""
    """this node's client certificate (PEM), for servers that verify clients"""
    key_file: str = ""
    """its private key (PEM, unencrypted; keep it mode 0600)"""
    hostname: str = ""
    """the name the server certificate must carry when the URL has an IP ("" = the URL's host)"""
    handshake_first: bool = True
    """TLS before anything else, so credentials can never go to a server that does not speak TLS; the servers need
    `tls { handshake_first: true }` (rendered so by mgrpo deploy). false: servers that start in plain text (then a
    plain-text server is refused after the handshake, but nats-py has sent the credentials by then)."""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("nats.tls: cert_file and key_file go together (a client certificate needs its key)")
        for key, path in (("ca_file", self.ca_file), ("cert_file", self.cert_file), ("key_file", self.key_file)):
            if path:
                _readable_file(f"nats.tls.{key}", path)

    @property
    def enabled(self) -> bool:
        return bool(self.ca_file or self.cert_file)

    def context(self) -> ssl.SSLContext:
        """A client SSLContext: verifies the server against `ca_file`, presents `cert_file` if set."""
        try:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file or None)
        except ssl.SSLError as exc:  # an OSError: the callers' config errors are ValueErrors (exit 2)
            raise ValueError(f"nats.tls.ca_file: {self.ca_file} is not a PEM CA certificate: {exc}") from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file:
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except ssl.SSLError as exc:
                raise ValueError(
                    f"nats.tls: {self.cert_file} and {self.key_file} are not a certificate and its key: {exc}"
                ) from None
        return context


def connect_security(url: str, auth: NatsAuthConfig, tls: NatsTlsConfig) -> ConnectSecurity | None:
    """What `Bus` needs to connect as `auth` over `tls` (None when neither is configured and the URL is plain)."""
    wants_tls = tls.enabled or any(server.strip().startswith("tls://") for server in url.split(","))
    if not auth.user and not wants_tls and auth.inbox_prefix == DEFAULT_INBOX_PREFIX:
        return None
    return ConnectSecurity(
        user=auth.user,
        password=auth.password() if auth.user else "",
        tls=tls.context() if wants_tls else None,
        tls_hostname=tls.hostname,
        inbox_prefix=auth.inbox_prefix,
        ca_file=tls.ca_file,
        cert_file=tls.cert_file,
        tls_handshake_first=tls.handshake_first and wants_tls,
    )
