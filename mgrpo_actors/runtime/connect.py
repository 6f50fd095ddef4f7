"""Reaching NATS: a fast reachability check and quiet short-lived connections for CLI tools."""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

import nats

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.errors import BusConnectError
from mgrpo_actors.runtime.security import ConnectSecurity, explain_connect_error, plaintext_refusal

__all__ = ["check_reachable", "connect_client", "server_list"]

log = get_logger(__name__)


def server_list(url: str) -> list[str]:
    """The servers of a comma-separated URL list (nats-py takes a list; a comma-separated string
    would be parsed as one malformed URL)."""
    return [server.strip() for server in url.split(",") if server.strip()]


async def check_reachable(url: str, timeout_s: float) -> None:
    """Raise BusConnectError unless one server of `url` (comma-separated) accepts a TCP connection.

    nats-py retries an unreachable first server for a long time; this fails fast with the URL named.
    The servers are tried at once, so one dead host of a cluster costs nothing when another answers.
    """
    addresses = []
    for server in server_list(url):
        parsed = urllib.parse.urlparse(server if "://" in server else f"nats://{server}")
        try:
            addresses.append((parsed.hostname or "127.0.0.1", parsed.port or 4222))
        except ValueError as exc:
            raise BusConnectError(url, f"invalid URL: {exc}") from None

    async def probe(host: str, port: int) -> str:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
            writer.close()
            return ""
        except (TimeoutError, OSError) as exc:
            return f"{host}:{port}: {type(exc).__name__}: {exc}".rstrip(": ")

    errors = []
    for result in asyncio.as_completed([probe(host, port) for host, port in addresses]):
        error = await result
        if not error:
            return  # the probes still running end on their own within timeout_s
        errors.append(error)
    raise BusConnectError(url, "; ".join(errors))


async def connect_client(url: str, name: str, timeout_s: float = 3.0, security: ConnectSecurity | None = None) -> Any:
    """A plain nats-py connection for short-lived tools (tap, ping): fails fast, logs quietly;
    `security`: its user and TLS (runtime/security.py)."""
    await check_reachable(url, timeout_s)

    async def quiet(exc: Exception) -> None:
        log.debug("nats error", url=url, error=str(exc))

    try:
        nc = await asyncio.wait_for(
            nats.connect(
                server_list(url),
                name=name,
                connect_timeout=timeout_s,
                allow_reconnect=False,
                error_cb=quiet,
                **(security.nats_options() if security else {}),
            ),
            timeout_s + 1,
        )
    except Exception as exc:
        raise BusConnectError(url, explain_connect_error(exc, security)) from None
    if refusal := plaintext_refusal(nc, security):
        await nc.close()
        raise BusConnectError(url, refusal)
    return nc
