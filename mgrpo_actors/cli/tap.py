"""`mgrpo tap [SUBJECT]`: print every message on a subject (default `mgrpo.>`) as one JSON line.

    mgrpo tap --nats nats://host:4222                         # everything of every run, live
    mgrpo tap 'mgrpo.r1.metrics.>' --count 10                 # ten metric samples of run r1
    mgrpo tap --stream mgrpo-r1-metrics --from-start          # replay a JetStream stream
    mgrpo tap --run-dir runs/r1 'mgrpo.r1.events'             # a local `mgrpo run`: its server, as its user

Each line: {"subject", "time" (send time, ISO 8601), "type", "payload"}; arrays are shown as
{"dtype", "shape"}, bytes as {"bytes": length}. A message that does not decode is shown with its
"error" instead of a payload, never dropped. Long fields are cut so one big message cannot flood the
terminal: a string beyond `--max-chars` (default 200) ends in "… [+N chars]", a list or mapping beyond
`--max-items` (default 20) ends in a "… [+N items]" entry; `--full` prints everything.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import sys
from datetime import UTC, datetime
from typing import Any

import nats.js.errors
import numpy as np

from mgrpo_actors.cli.arguments import add_connection_arguments, connection
from mgrpo_actors.runtime.connect import connect_client
from mgrpo_actors.runtime.errors import BusConnectError
from mgrpo_actors.runtime.stream_reader import follow_stream
from protocols import ProtocolError, decode_envelope

__all__ = ["Cut", "add_parser", "message_to_json", "run_tap"]


@dataclasses.dataclass(frozen=True)
class Cut:
    """How much of each field a tap line shows (None: all of it)."""

    max_chars: int | None = 200  # characters of a string field
    max_items: int | None = 20  # entries of a list or mapping field


FULL = Cut(None, None)


def _cut_text(text: str, cut: Cut) -> str:
    if cut.max_chars is None or len(text) <= cut.max_chars:
        return text
    return f"{text[: cut.max_chars]}… [+{len(text) - cut.max_chars} chars]"


def _jsonable(value: Any, cut: Cut = FULL) -> Any:
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.name, "shape": list(value.shape)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": len(value)}
    if isinstance(value, str):
        return _cut_text(value, cut)
    if isinstance(value, dict):
        items = list(value.items())
        shown = items if cut.max_items is None else items[: cut.max_items]
        out = {_cut_text(str(k), cut): _jsonable(v, cut) for k, v in shown}
        if len(shown) < len(items):
            out["…"] = f"[+{len(items) - len(shown)} items]"
        return out
    if isinstance(value, (list, tuple)):
        shown = value if cut.max_items is None else value[: cut.max_items]
        return [_jsonable(v, cut) for v in shown] + (
            [f"… [+{len(value) - len(shown)} items]"] if len(shown) < len(value) else []
        )
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")  # JSON has no such numbers
    return value


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


def _valid_subject(subject: str) -> bool:
    tokens = subject.split(".")
    if not subject or any(not t or any(c.isspace() for c in t) for t in tokens):
        return False
    return all(t != ">" or i == len(tokens) - 1 for i, t in enumerate(tokens))


def message_to_json(subject: str, data: bytes, cut: Cut = FULL) -> str:
    """One tap line for a raw NATS message, its fields cut as `cut` says."""
    try:
        env = decode_envelope(data)
    except ProtocolError as exc:
        return json.dumps(
            {"subject": subject, "time": _iso(datetime.now(UTC).timestamp()), "error": str(exc), "size": len(data)}
        )
    payload = {f.name: _jsonable(getattr(env.message, f.name), cut) for f in dataclasses.fields(env.message)}  # type: ignore[arg-type]
    return json.dumps(
        {"subject": subject, "time": _iso(env.sent_at), "type": env.type_name, "payload": payload}, allow_nan=False
    )


async def run_tap(
    url: str,
    subject: str,
    stream: str | None,
    from_start: bool,
    count: int | None,
    duration_s: float | None,
    out: Any = sys.stdout,
    cut: Cut = Cut(),
    security: Any = None,
) -> int:
    """Print messages until `count` were printed, `duration_s` passed, or the process is interrupted."""
    if not _valid_subject(subject):
        print(
            f"mgrpo tap: error: {subject!r} is not a valid NATS subject "
            "(tokens separated by '.', no spaces; '*' and a final '>' as wildcards)",
            file=sys.stderr,
        )
        return 2
    try:
        nc = await connect_client(url, "mgrpo-tap", security=security)
    except BusConnectError as exc:
        print(f"mgrpo tap: error: {exc}", file=sys.stderr)
        return 3
    seen = 0
    done = asyncio.Event()
    follower = None

    async def on_msg(msg: Any) -> None:
        nonlocal seen
        if done.is_set():
            return
        print(message_to_json(msg.subject, msg.data, cut), file=out, flush=True)
        seen += 1
        if count is not None and seen >= count:
            done.set()

    try:
        if stream:
            try:
                follower = await follow_stream(
                    nc, stream, subject if subject != "mgrpo.>" else None, on_msg, from_start
                )
            except nats.js.errors.NotFoundError:
                print(f"mgrpo tap: error: stream {stream!r} not found", file=sys.stderr)
                return 2
            except Exception as exc:
                # e.g. a user whose permissions do not cover the stream: the server's refusal looks like a timeout
                print(f"mgrpo tap: error: cannot read stream {stream!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
                return 3
        else:
            await nc.subscribe(subject, cb=on_msg)
        await nc.flush()
        try:
            await asyncio.wait_for(done.wait(), timeout=duration_s)
        except TimeoutError:
            pass
    finally:
        if follower is not None:
            await follower.unsubscribe()
        await nc.close()
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "tap",
        help="print messages of a subject or stream as JSON lines",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("subject", nargs="?", default="mgrpo.>", help="subject to listen to (default: mgrpo.>)")
    add_connection_arguments(p)
    p.add_argument("--stream", metavar="NAME", help="read a JetStream stream instead of live core subjects")
    p.add_argument("--from-start", action="store_true", help="with --stream: replay from the first stored message")
    p.add_argument("--count", type=_positive_int, metavar="N", help="stop after N messages (N >= 1)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument(
        "--max-chars",
        type=_positive_int,
        default=Cut.max_chars,
        metavar="N",
        help=f"cut string fields after N characters (default {Cut.max_chars})",
    )
    p.add_argument(
        "--max-items",
        type=_positive_int,
        default=Cut.max_items,
        metavar="N",
        help=f"cut list and mapping fields after N entries (default {Cut.max_items})",
    )
    p.add_argument("--full", action="store_true", help="print every field whole (no cut)")
    p.set_defaults(func=_run)


def _run(args: Any) -> int:
    try:
        url, security, _ = connection(args)
    except ValueError as exc:  # ConfigError is a ValueError: a wrong --config, password file or certificate
        print(f"mgrpo tap: error: {exc}", file=sys.stderr)
        return 2
    cut = FULL if args.full else Cut(args.max_chars, args.max_items)
    return asyncio.run(
        run_tap(url, args.subject, args.stream, args.from_start, args.count, args.duration, cut=cut, security=security)
    )
