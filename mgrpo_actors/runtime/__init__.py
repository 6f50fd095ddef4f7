"""The NATS actor runtime: one bus connection per process, pykka actors fed from subjects and streams.

- `Bus`: the process's NATS connection on its own asyncio thread, with a blocking API callable from
  any actor thread (publish, request/reply, subscribe, JetStream, KV, drain).
- `BusActor`: a pykka actor whose mailbox receives bus deliveries, one at a time, and whose
  failures go to the dead-letter subject instead of killing it.
- `request_retrying` / `request_all`: requests resent, within a bounded budget, when another instance
  may answer (a timeout, no responders, an actor that was stopping).
- `EmbeddedNats`: the venv's nats-server with JetStream on a free loopback port.
"""

from mgrpo_actors.runtime.actor import HOLD, UNAVAILABLE, BusActor, is_transient
from mgrpo_actors.runtime.batching import PendingBatch, RunBatch
from mgrpo_actors.runtime.bus import Bus
from mgrpo_actors.runtime.connect import check_reachable, connect_client
from mgrpo_actors.runtime.consumer import Consumer, ensure_durable
from mgrpo_actors.runtime.delivery import Delivery, KvUpdate
from mgrpo_actors.runtime.embedded import EmbeddedNats, nats_server_binary
from mgrpo_actors.runtime.errors import BusConnectError, BusError, NoResponders, RemoteFailure, RequestTimeout
from mgrpo_actors.runtime.jetstream import StreamLimits
from mgrpo_actors.runtime.kv import KvBucket
from mgrpo_actors.runtime.objects import ObjectBucket
from mgrpo_actors.runtime.replay import replay_stream
from mgrpo_actors.runtime.retry import CallOutcome, is_retryable, request_all, request_retrying
from mgrpo_actors.runtime.shutdown import ShutdownSignal
from mgrpo_actors.runtime.stream_reader import StoredMessage, follow_stream
from mgrpo_actors.runtime.subscription import Subscription
from mgrpo_actors.runtime.ticker import Ticker

__all__ = [
    "HOLD",
    "UNAVAILABLE",
    "Bus",
    "BusActor",
    "BusConnectError",
    "BusError",
    "CallOutcome",
    "Consumer",
    "Delivery",
    "EmbeddedNats",
    "ensure_durable",
    "KvBucket",
    "KvUpdate",
    "NoResponders",
    "ObjectBucket",
    "PendingBatch",
    "RemoteFailure",
    "RequestTimeout",
    "RunBatch",
    "ShutdownSignal",
    "StreamLimits",
    "Subscription",
    "Ticker",
    "check_reachable",
    "connect_client",
    "is_retryable",
    "is_transient",
    "nats_server_binary",
    "replay_stream",
    "request_all",
    "request_retrying",
    "follow_stream",
    "StoredMessage",
]
