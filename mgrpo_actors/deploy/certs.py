"""A development certificate authority for TLS between nodes and NATS servers (`mgrpo deploy certs`).

Makes, with the `cryptography` package: a CA (ca.pem, ca-key.pem), one server certificate for the
given hosts (server.pem, server-key.pem: every host as a DNS or IP subject alternative name, so the
same certificate serves every NATS server of a small cluster), and one client certificate per name
(<name>.pem, <name>-key.pem) for servers that verify clients. Keys are EC P-256, written mode 0600.
For production, use your organisation's CA; nodes only need the CA's PEM and, if the servers verify
clients, a certificate and key each (nats.tls.ca_file, cert_file, key_file).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateSet", "make_certificates"]


@dataclass(frozen=True)
class CertificateSet:
    """Paths of what `make_certificates` wrote."""

    ca: Path
    ca_key: Path
    server: Path
    server_key: Path
    clients: dict[str, tuple[Path, Path]]  # name -> (certificate, key)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)  # also when the file existed with wider permissions


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _signed(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )


def make_certificates(
    out: Path,
    hosts: list[str],
    clients: list[str] = (),
    days: float = 365.0,
    not_before: datetime.datetime | None = None,
) -> CertificateSet:  # type: ignore[assignment]
    """Write a CA, a server certificate for `hosts` and a client certificate per name into `out`.

    `days` is how long they are valid from `not_before` (default: now, less a minute for clock skew);
    a `not_before` in the past with few days makes an expired set (tests use it).
    """
    if not hosts:
        raise ValueError("at least one host (a DNS name or an IP address the servers are reached at) is needed")
    for name in clients:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"client name {name!r} cannot be a file name")
    out.mkdir(parents=True, exist_ok=True)
    start = (not_before or datetime.datetime.now(datetime.UTC)) - datetime.timedelta(minutes=1)
    end = start + datetime.timedelta(days=days)

    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mgrpo-actors development CA")])
    ca_cert = (
        _signed("mgrpo-actors development CA", ca_key, ca_name, ca_key, start, end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {
        "ca": out / "ca.pem",
        "ca_key": out / "ca-key.pem",
        "server": out / "server.pem",
        "server_key": out / "server-key.pem",
    }
    _write_cert(paths["ca"], ca_cert)
    _write_key(paths["ca_key"], ca_key)

    server_key = _key()
    server_cert = (
        _signed(hosts[0], server_key, ca_name, ca_key, start, end)
        .add_extension(x509.SubjectAlternativeName([_alt_name(h) for h in hosts]), critical=False)
        # routes use it both ways
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_cert(paths["server"], server_cert)
    _write_key(paths["server_key"], server_key)

    written: dict[str, tuple[Path, Path]] = {}
    for name in clients:
        key = _key()
        cert = (
            _signed(name, key, ca_name, ca_key, start, end)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        written[name] = (out / f"{name}.pem", out / f"{name}-key.pem")
        _write_cert(written[name][0], cert)
        _write_key(written[name][1], key)
    return CertificateSet(paths["ca"], paths["ca_key"], paths["server"], paths["server_key"], written)
