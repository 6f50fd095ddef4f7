"""Who a connection is and how it is protected: a NATS user with its password, TLS (the CA that signed
the servers, this client's certificate), and the inbox prefix its replies come back under. Built from
the node config (config/nats_security.py), handed to `Bus` and `connect_client`; and the connection
errors these cause, said in words (wrong CA, expired certificate, wrong password), so a node exits 3
naming the cause rather than a bare exception."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_INBOX_PREFIX", "ConnectSecurity", "explain_connect_error", "names_cause", "plaintext_refusal"]

DEFAULT_INBOX_PREFIX = "_INBOX"  # nats-py's; replies to a node come back on <prefix>.<random>


@dataclass(frozen=True)
class ConnectSecurity:
    """Credentials and TLS of one connection (secrets already read from their files or variables)."""

    user: str = ""
    password: str = ""
    tls: ssl.SSLContext | None = None
    tls_hostname: str = ""  # the name the server certificate must carry, when the URL has an IP
    inbox_prefix: str = DEFAULT_INBOX_PREFIX
    tls_handshake_first: bool = False  # TLS before the server's INFO (servers with `tls { handshake_first: true }`)
    ca_file: str = ""  # for error messages only
    cert_file: str = ""

    def __repr__(self) -> str:  # never print the password
        return (
            f"ConnectSecurity(user={self.user!r}, password={'***' if self.password else ''!r}, "
            f"tls={self.tls is not None}, inbox_prefix={self.inbox_prefix!r})"
        )

    def nats_options(self) -> dict[str, Any]:
        """Keyword arguments of `nats.connect` for this security."""
        options: dict[str, Any] = {"inbox_prefix": self.inbox_prefix}
        if self.user:
            options.update(user=self.user, password=self.password)
        if self.tls is not None:
            options["tls"] = self.tls
            if self.tls_hostname:
                options["tls_hostname"] = self.tls_hostname
            if self.tls_handshake_first:
                options["tls_handshake_first"] = True
        return options


def explain_connect_error(exc: BaseException, security: ConnectSecurity | None) -> str:
    """A failed connect in words: the cause a user can act on, then the exception itself (the
    messages matched are those of Python's ssl module and nats-server 2.15, as measured)."""
    text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    lowered = text.lower()
    security = security or ConnectSecurity()
    if "certificate has expired" in lowered:
        return f"TLS: the server's certificate has expired (renew it) [{text}]"
    if "hostname mismatch" in lowered:
        return (
            "TLS: the server's certificate is not valid for the host in the URL "
            f"(use a name it carries, or nats.tls.hostname) [{text}]"
        )
    if "certificate verify failed" in lowered:
        ca = (
            f"nats.tls.ca_file ({security.ca_file})"
            if security.ca_file
            else "the system's CA store (set nats.tls.ca_file)"
        )
        return f"TLS: the server's certificate is not signed by a CA in {ca}: wrong CA [{text}]"
    if "wrong_version_number" in lowered or "wrong version number" in lowered:
        return f"TLS: this server does not speak TLS (a plain-text server): nothing was sent to it [{text}]"
    if "empty response from server when expecting info" in lowered:
        return (
            "TLS: this server starts with a TLS handshake (handshake_first): "
            f"connect with a tls:// URL and nats.tls.ca_file [{text}]"
        )
    if "certificate required" in lowered or "certificate_required" in lowered:
        return f"TLS: the server wants a client certificate (set nats.tls.cert_file and nats.tls.key_file) [{text}]"
    if "authorization violation" in lowered:
        who = (
            f"user {security.user!r}"
            if security.user
            else "no user (set nats.auth.user and its password file or variable)"
        )
        return f"NATS refused the credentials of {who}: wrong user or password [{text}]"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed (check nats.tls and the server's TLS settings) [{text}]"
    return text


def names_cause(exc: BaseException) -> bool:
    """Whether `explain_connect_error` knows what `exc` means (a TLS or credentials failure), as
    opposed to what follows one (a broken pipe as the server hangs up)."""
    return explain_connect_error(exc, None) != f"{type(exc).__name__}: {exc}".rstrip(": ")


def plaintext_refusal(nc: Any, security: ConnectSecurity | None) -> str:
    """Why a connection that TLS was asked for must be dropped ("" when all is well). nats-py upgrades to
    TLS only when the server's INFO requires it, and otherwise connects in plain text even to a tls://
    URL (measured with nats-py 2.16): a node configured for TLS must not talk to such a server."""
    if security is None or security.tls is None:
        return ""
    info = getattr(nc, "_server_info", None) or {}  # the server's INFO; nats-py keeps it there
    if info.get("tls_required"):
        return ""
    return (
        "TLS was asked for (a tls:// URL or nats.tls) but this server does not speak TLS: "
        "refusing a plain-text connection (set nats.tls.handshake_first so credentials are never sent to such a server)"
    )
