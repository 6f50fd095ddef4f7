"""The small description of a deployment that `mgrpo deploy nats-config` renders (deploy/nats/deployment.yaml):
its NATS servers, TLS, JetStream, the run ids its users may work on and their sub-agent types, and the tools
served. Everything else (users, permissions, the node configs' `nats` sections) is derived from it and the
role table."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from mgrpo_actors.config.node import check_range
from protocols import DEFAULT_MAX_BYTES, DEFAULT_SUB_TYPE, validate_run_id
from protocols.subjects import sides_of

__all__ = ["DeploymentDescription", "JetStreamSettings", "ServerAddress", "TlsSettings"]


def _is_address(host: str) -> bool:
    """An IP address, or a DNS name (letters, digits, '-' in dot-separated labels)."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        labels = host.split(".")
        return (
            bool(host)
            and len(host) <= 253
            and all(label and len(label) <= 63 and all(c.isalnum() or c == "-" for c in label) for label in labels)
        )


@dataclass(frozen=True)
class ServerAddress:
    """One nats-server of the deployment."""

    name: str = "nats-1"  # server_name (unique; JetStream needs it in a cluster)
    host: str = "127.0.0.1"  # where nodes and the other servers reach it (a DNS name or an IP, in the certificate)
    client_port: int = 4222  # clients (nodes, mgrpo tap)
    cluster_port: int = 6222  # routes between the servers of a cluster
    monitor_port: int = 8222  # HTTP monitoring (/varz, /jsz), on 127.0.0.1 only
    # the address its client and cluster ports listen on: 0.0.0.0 every interface (IPv4), :: every interface (IPv6),
    # or one interface's IP (or name) so the server is not reachable on the others (a public one, say)
    listen_host: str = "0.0.0.0"

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise ValueError(f"servers[].name {self.name!r}: letters, digits, '-' and '_' only")
        for key in ("client_port", "cluster_port", "monitor_port"):
            check_range(f"servers[{self.name}].{key}", getattr(self, key), 1, 65535)
        if not _is_address(self.listen_host):
            raise ValueError(
                f"servers[{self.name}].listen_host {self.listen_host!r}: an IP address (0.0.0.0: every interface) "
                "or a host name"
            )

    def listen(self, port: int) -> str:
        """`host:port` for nats-server's `listen` on `listen_host` (an IPv6 address in brackets)."""
        host = self.listen_host
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class TlsSettings:
    """TLS of every client connection and route."""

    enabled: bool = True  # tls {} on every server; nodes connect with tls:// URLs and the CA
    # where `mgrpo deploy certs` wrote ca.pem, server.pem, server-key.pem (relative to the output)
    certs_dir: str = "certs"
    verify_clients: bool = False  # servers also demand a client certificate from every connection
    timeout_s: float = 2.0  # TLS handshake timeout on the servers

    def __post_init__(self) -> None:
        check_range("tls.timeout_s", self.timeout_s, 0.1, 60)


@dataclass(frozen=True)
class JetStreamSettings:
    """JetStream of every server."""

    store_dir: str = "/var/lib/mgrpo/nats"  # where each server keeps its streams
    max_file_store: str = "50G"  # disk JetStream may use per server
    replicas: int = 1  # stream replicas (nats.replicas of the nodes): 3 on a 3-server cluster


@dataclass(frozen=True)
class DeploymentDescription:
    """A deployment: servers, TLS, JetStream, runs, tools."""

    servers: list[ServerAddress] = field(default_factory=lambda: [ServerAddress()])  # 1 server, or 3+ for a cluster
    cluster_name: str = "mgrpo"  # name of the cluster when there are several servers
    # runs the users may work on (stream and bucket names hold the run id)
    run_ids: list[str] = field(default_factory=lambda: ["default"])
    # the sub-agent types of those runs (the names under agents.subs; ["sub"]: runs that name none): each type is
    # its own side, so its own account (SUB, or SUB_<TYPE>) with its own users (<type>-agent, <type>-aligner,
    # <type>-learner) and admin; list every type any of the runs has
    sub_types: list[str] = field(default_factory=lambda: [DEFAULT_SUB_TYPE])
    tls: TlsSettings = field(default_factory=TlsSettings)
    jetstream: JetStreamSettings = field(default_factory=JetStreamSettings)
    max_payload: int = DEFAULT_MAX_BYTES  # = nats.max_message_bytes of the nodes
    secrets_dir: str = "secrets"  # one password file per user (mode 0600), relative to the output
    # how long an answer to a request may take (service exports' response_threshold, allow_responses' expiry):
    # above the longest pipeline.subtask_timeout_s
    reply_window_s: float = 3600.0

    def __post_init__(self) -> None:
        if not self.servers:
            raise ValueError("servers: at least one server")
        names = [s.name for s in self.servers]
        if len(set(names)) != len(names):
            raise ValueError(f"servers: names must be unique, got {names}")
        if len(self.servers) == 2:
            raise ValueError("servers: 1 server, or 3 or more (JetStream needs a majority: 2 servers cannot lose one)")
        if not self.run_ids:
            raise ValueError("run_ids: at least one run id")
        for run_id in self.run_ids:
            validate_run_id(run_id)
        sides_of(tuple(self.sub_types))  # names a type once, each a valid name
        check_range("jetstream.replicas", self.jetstream.replicas, 1, len(self.servers))
        check_range("max_payload", self.max_payload, 1024, 64 * 1024 * 1024)
        check_range("reply_window_s", self.reply_window_s, 1, 7 * 24 * 3600)

    def urls(self, tls: bool | None = None) -> str:
        """Every server's client URL, comma-separated (what nodes put in nats.url)."""
        scheme = "tls" if (self.tls.enabled if tls is None else tls) else "nats"
        return ",".join(f"{scheme}://{s.host}:{s.client_port}" for s in self.servers)
