"""Hostile traffic for `mgrpo bench soak` (issue 8): what a broken or malicious peer on a run's NATS can
send its tool nodes, one attack per method, each sent the way issue 8 found it hurting a node.

Every attack but `flood` and `deafen` is one the nodes must refuse: the message is dead-lettered with
its reason (a requester gets a Failure) and the node goes on. `flood` is valid-shaped requests nobody
waits for (served, but they queue ahead of real work), plus megabytes of garbage on the ping subject
(what nats-py cannot hold is dropped and counted as slow-consumer events). `deafen` is the raw message
that used to kill nats-py's read loop (finding 1): each node must notice and reconnect within seconds.
"""

from __future__ import annotations

import collections
import random
import socket
import time
from collections.abc import Callable
from urllib.parse import urlparse

import msgpack

from mgrpo_actors.runtime import Bus
from protocols import SCHEMA_VERSION, ToolRequest, encode
from protocols.codec import MAX_MAP_ENTRIES

__all__ = ["HostileTraffic"]

FLOOD_REQUESTS = 300  # valid-shaped requests per flood, all at once
FLOOD_GARBAGE = 40  # garbage messages of FLOOD_GARBAGE_BYTES per flood on the ping subject
FLOOD_GARBAGE_BYTES = 1024 * 1024
OVERSIZE_TEXT_CHARS = 1024 * 1024  # a valid request the delay tool echoes whole


class HostileTraffic:
    """Sends attacks on `bus` (the attacker's own connection) and raw sockets to `url`; counts what it sent."""

    def __init__(self, bus: Bus, url: str, tool: str, seed: int = 0) -> None:
        self.bus = bus
        self.url = url
        self.tool_subject = bus.subjects.tool(tool)
        self.tool = tool
        self.sent: collections.Counter[str] = collections.Counter()
        self._rng = random.Random(seed)
        self._n = 0

    def cycle(self) -> list[Callable[[], None]]:
        """The attacks sent round after round (not `deafen`, which the soak sends once)."""
        return [self.garbage, self.bad_reply, self.map_bomb, self.oversize, self.flood, self.raw_over_max_payload]

    def _inbox(self) -> str:
        self._n += 1
        return f"_INBOX.hostile.{self._n}"  # nobody reads it: the node's answer goes nowhere

    def _request(self, text: str) -> bytes:
        return encode(ToolRequest(call_id=f"hostile-{self._n}", tool=self.tool, arguments={"text": text}))

    def garbage(self) -> None:
        """16 random payloads of 1–4 KB on the tool subject, each with a reply inbox."""
        for _ in range(16):
            self.bus.publish(self.tool_subject, self._rng.randbytes(self._rng.randint(1024, 4096)), reply=self._inbox())
            self.sent["garbage"] += 1

    def bad_reply(self) -> None:
        """Valid requests whose reply subjects name a trajectory stream, a batch stream and the ping
        subject (finding 2: a node must answer only inboxes)."""
        subjects = self.bus.subjects
        for reply in (subjects.trajectories("main"), subjects.batches("sub"), subjects.node_ping):
            self.bus.publish(self.tool_subject, self._request("bad reply"), reply=reply)
            self.sent["bad_reply"] += 1

    def map_bomb(self) -> None:
        """A request whose arguments map has one entry more than the codec decodes (MAX_MAP_ENTRIES)."""
        arguments = {i: None for i in range(MAX_MAP_ENTRIES + 1)}
        envelope = {
            "v": SCHEMA_VERSION,
            "t": "ToolRequest",
            "ts": time.time(),
            "d": {"call_id": "bomb", "tool": self.tool, "arguments": arguments},
        }
        self.bus.publish(self.tool_subject, msgpack.packb(envelope), reply=self._inbox())
        self.sent["map_bomb"] += 1

    def oversize(self) -> None:
        """A valid request with a 1 MiB argument (echoed back whole by the delay tool)."""
        self.bus.publish(self.tool_subject, self._request("x" * OVERSIZE_TEXT_CHARS), reply=self._inbox())
        self.sent["oversize"] += 1

    def flood(self) -> None:
        """FLOOD_REQUESTS valid-shaped requests at once, then FLOOD_GARBAGE MiB of garbage to every node's ping
        subject."""
        for i in range(FLOOD_REQUESTS):
            self.bus.publish(self.tool_subject, self._request(f"flood {i}"), reply=self._inbox())
        garbage = bytes(FLOOD_GARBAGE_BYTES)
        for _ in range(FLOOD_GARBAGE):
            self.bus.publish(self.bus.subjects.node_ping, garbage)
        self.sent["flood_requests"] += FLOOD_REQUESTS
        self.sent["flood_garbage"] += FLOOD_GARBAGE

    def _raw(self, data: bytes) -> None:
        url = urlparse(self.url)
        with socket.create_connection((url.hostname or "127.0.0.1", url.port or 4222), timeout=5) as raw:
            raw.recv(4096)  # INFO
            raw.sendall(b"CONNECT {}\r\n" + data)
            time.sleep(0.1)  # let the server read it before the socket closes

    def raw_over_max_payload(self) -> None:
        """A raw PUB declaring more bytes than the server's max_payload (the server refuses it and
        closes that connection; nothing reaches a node)."""
        self._raw(f"PUB {self.tool_subject} {1 << 31}\r\n".encode())
        self.sent["raw_over_max_payload"] += 1

    def deafen(self) -> None:
        """The finding-1 message: a PUB to every node's ping subject with the reply subject b"\\xff"."""
        self._raw(f"PUB {self.bus.subjects.node_ping} \xff 0\r\n\r\n".encode("latin-1"))
        self.sent["deafen"] += 1
