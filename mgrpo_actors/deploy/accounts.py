"""The sides as NATS accounts (docs/architecture.md §Sides and what crosses them): `MAIN`, `SUB`, `TOOLS` and a
read-only `MONITOR`, each with JetStream and its own streams. A subject published in one account does
not exist in another unless the first exports it and the second imports it, whatever a process tries:
the server keeps the accounts apart. `CROSSINGS` is every subject that crosses, each with why it must;
`account_block` renders one account's users, exports and imports for a deployment's runs.

Measured on nats-server 2.15.1 with nats-py (the facts this layout relies on):
- a stream in the importing account captures an imported subject (SUB's `stats` stream keeps MAIN's
  scalars; MONITOR's metrics stream keeps every account's metrics and events);
- `js.publish` needs a stream in the publisher's own account for its ack, so both accounts keep a
  stream on a crossing subject (the `stats` and `steps` streams exist in MAIN and in SUB);
- a service import delivers the request with a reply subject `_R_.…` (the runtime answers those too),
  and the answer needs `allow_responses` on the responder's user;
- an account that imports a subject does not pass it on to a third that imports the same subject
  from it (MONITOR gets MAIN's events once, though SUB imports and exports `events` too);
- subjects exported both ways between two accounts make the server refuse to start ("import forms a
  cycle"), so the step events cross one direction per subject (step.start MAIN → SUB; step.aligned.sub
  and step.done.sub SUB → MAIN);
- a request with no responder in the exporting account times out rather than answering "no
  responders" (runtime/retry.py resends it as a failed attempt).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mgrpo_actors.deploy.access import RoleAccess, common_access
from protocols import Subjects

__all__ = [
    "ACCOUNTS",
    "CROSSINGS",
    "DEFAULT_REPLY_WINDOW_S",
    "AccountResources",
    "Crossing",
    "account_block",
    "account_resources",
    "accounts_section",
    "crossings_into",
    "crossings_out_of",
]

# The accounts of a deployment: each role's user lives in one of them (RoleAccess.account).
ACCOUNTS = ("MAIN", "SUB", "TOOLS", "MONITOR")


@dataclass(frozen=True)
class Crossing:
    """One subject that crosses from one account into others."""

    subject: str  # relative to mgrpo.<run>. ("stats", "tool.*")
    service: bool  # request/reply answered in `source` (True), or messages published in `source` (False)
    source: str  # the account that exports it
    into: tuple[str, ...]  # the accounts that import it (and only they may: the export names them)
    why: str  # which role needs it

    def __post_init__(self) -> None:
        for account in (self.source, *self.into):
            if account not in ACCOUNTS:
                raise ValueError(
                    f"crossing {self.subject!r}: unknown account {account!r} (accounts: {', '.join(ACCOUNTS)})"
                )
        if self.source in self.into:
            raise ValueError(f"crossing {self.subject!r}: {self.source} cannot import its own subject")


# Everything that crosses (docs/architecture.md: subtask requests and results, the scalar reward statistics, and
# the step events the other side needs; tools serve both sides; the monitor watches every account).
# Trajectories, batches, weights and their KV/object stores cross nothing.
CROSSINGS: tuple[Crossing, ...] = (
    Crossing("subtask.request", True, "SUB", ("MAIN",), "main agents delegate subtasks to sub-agents"),
    Crossing("tool.*", True, "TOOLS", ("MAIN", "SUB"), "both sides' agents call the tools"),
    Crossing(
        "stats",
        False,
        "MAIN",
        ("SUB",),
        "the sub-aligner's scalar reward statistics (R_M, r_format, r_correct, sub-call ids)",
    ),
    Crossing("step.start", False, "MAIN", ("SUB",), "the sub-aligner's step plans (from the controller)"),
    Crossing("step.aligned.sub", False, "SUB", ("MAIN",), "the controller hears the sub batch is ready"),
    Crossing("step.done.sub", False, "SUB", ("MAIN",), "the controller hears the sub learner applied a step"),
    Crossing(
        "events",
        False,
        "MAIN",
        ("SUB", "TOOLS", "MONITOR"),
        "run.finished stops every node; the monitor shows the events",
    ),
    Crossing("events", False, "SUB", ("MONITOR",), "the monitor shows the sub side's events"),
    Crossing("events", False, "TOOLS", ("MONITOR",), "the monitor shows the tools' events"),
    Crossing("metrics.>", False, "MAIN", ("MONITOR",), "the monitor's metrics"),
    Crossing("metrics.>", False, "SUB", ("MONITOR",), "the monitor's metrics"),
    Crossing("metrics.>", False, "TOOLS", ("MONITOR",), "the monitor's metrics"),
    Crossing("query.done", False, "MAIN", ("MONITOR",), "the monitor's query progress"),
)


def crossings_out_of(account: str, crossings: Iterable[Crossing] = CROSSINGS) -> list[Crossing]:
    """What `account` exports."""
    return [c for c in crossings if c.source == account]


def crossings_into(account: str, crossings: Iterable[Crossing] = CROSSINGS) -> list[Crossing]:
    """What `account` imports."""
    return [c for c in crossings if account in c.into]


@dataclass(frozen=True)
class AccountResources:
    """The streams, KV buckets and object stores of a run that live in one account (short names)."""

    streams: tuple[str, ...]
    kv: tuple[str, ...]
    objects: tuple[str, ...]
    durables: tuple[str, ...] = ()  # durable consumers by name (protocols/durables.py)


def account_resources(accesses: Mapping[str, RoleAccess], account: str) -> AccountResources:
    """What the roles of `account` use, so what its admin provisions for a run: streams, KV buckets,
    object stores and durable consumers (every account also keeps the metrics and dead-letter streams
    its nodes write)."""
    streams, kv, objects, durables = list(common_access().streams), [], [], []
    for access in accesses.values():
        if access.account != account:
            continue
        streams += [*access.streams, *(stream for stream, _ in access.durables), *access.replays]
        kv += [*access.kv_read, *(bucket for bucket, _ in access.kv_write)]
        objects += [*access.objects_read, *access.objects_write]
        durables += [durable for _, durable in access.durables]
    return AccountResources(*(tuple(dict.fromkeys(names)) for names in (streams, kv, objects, durables)))


# nats-server forgets a service request's way back after its export's response_threshold (default 2
# minutes) and a responder's right to answer after allow_responses' expiry (default 2 minutes), while a
# subtask may take pipeline.subtask_timeout_s (300 s by default): both are rendered as the deployment's
# reply_window_s (measured with a 1 s threshold: an answer after 3 s never reached the requester).
DEFAULT_REPLY_WINDOW_S = 3600.0


def _entry(crossing: Crossing, subject: str, exported: bool, reply_window_s: float) -> str:
    """One crossing for one run as nats-server writes it: in the exporter's `exports` (naming the
    accounts that may import it), or in an importer's `imports` (naming the exporter)."""
    kind = "service" if crossing.service else "stream"
    if exported:
        threshold = f", response_threshold: {json.dumps(f'{reply_window_s:g}s')}" if crossing.service else ""
        return f"{{ {kind}: {json.dumps(subject)}, accounts: {json.dumps(list(crossing.into))}{threshold} }}"
    return f"{{ {kind}: {{ account: {json.dumps(crossing.source)}, subject: {json.dumps(subject)} }} }}"


def _entries(account: str, run_ids: list[str], exported: bool, reply_window_s: float) -> list[str]:
    crossings = crossings_out_of(account) if exported else crossings_into(account)
    return [
        _entry(c, f"{Subjects(run_id).root}.{c.subject}", exported, reply_window_s)
        for c in crossings
        for run_id in run_ids
    ]


def account_block(
    account: str, user_blocks: list[str], run_ids: list[str], reply_window_s: float = DEFAULT_REPLY_WINDOW_S
) -> str:
    """One account of the `accounts { … }` section: JetStream, its users (rendered), exports, imports."""
    lines = [f"  {account}: {{", "    jetstream: enabled", "    users: [", ",\n".join(user_blocks), "    ]"]
    for key, entries in (
        ("exports", _entries(account, run_ids, True, reply_window_s)),
        ("imports", _entries(account, run_ids, False, reply_window_s)),
    ):
        if entries:
            lines.append(f"    {key}: [")
            lines.append(",\n".join(f"      {entry}" for entry in entries))
            lines.append("    ]")
    lines.append("  }")
    return "\n".join(lines)


def accounts_section(
    users_by_account: Mapping[str, list[str]], run_ids: list[str], reply_window_s: float = DEFAULT_REPLY_WINDOW_S
) -> str:
    """The whole `accounts { … }` section from each account's rendered user blocks."""
    blocks = [
        account_block(account, users_by_account.get(account, []), run_ids, reply_window_s) for account in ACCOUNTS
    ]
    return "accounts {\n" + "\n".join(blocks) + "\n}"
