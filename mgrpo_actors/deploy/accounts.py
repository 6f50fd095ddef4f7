"""The sides as NATS accounts (docs/architecture.md §Sides and what crosses them): `MAIN`, one account per
sub-agent type (`SUB` for the one type of a run that names none, `SUB_<TYPE>` for a named type: `sub_account`),
`TOOLS` and a read-only `MONITOR`, each with JetStream and its own streams. A subject published in one account does
not exist in another unless the first exports it and the second imports it, whatever a process tries:
the server keeps the accounts apart. `crossings(sub_types)` is every subject that crosses, each with why it must
(`CROSSINGS`: those of a run with the one default type); `account_block` renders one account's users, exports and
imports for a deployment's runs.

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
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from mgrpo_actors.deploy.access import RoleAccess, common_access
from protocols import DEFAULT_SUB_TYPE, Subjects
from protocols.subjects import sides_of

__all__ = [
    "ACCOUNTS",
    "ACCOUNT_NAME",
    "CROSSINGS",
    "DEFAULT_REPLY_WINDOW_S",
    "AccountResources",
    "Crossing",
    "account_block",
    "account_resources",
    "accounts_of",
    "accounts_section",
    "crossings",
    "crossings_into",
    "crossings_out_of",
    "sub_account",
]

# An account's name: the fixed ones, or a sub-agent type's (sub_account).
ACCOUNT_NAME = re.compile(r"^(MAIN|TOOLS|MONITOR|SUB|SUB_[A-Z][A-Z0-9_]{0,31})$")


def sub_account(sub_type: str = DEFAULT_SUB_TYPE) -> str:
    """The account of a sub-agent type's side: `SUB` for the default type (its name from before runs had several
    types), `SUB_<TYPE>` for a named one (`searcher` -> `SUB_SEARCHER`)."""
    sides_of((sub_type,))  # a valid type name, so the account name is one too
    return "SUB" if sub_type == DEFAULT_SUB_TYPE else f"SUB_{sub_type.upper()}"


def accounts_of(sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)) -> tuple[str, ...]:
    """The accounts of a deployment whose runs have the sub-agent types `sub_types`: MAIN, one per type, TOOLS and
    MONITOR. Each role's user lives in one of them (RoleAccess.account)."""
    sides_of(sub_types)
    return ("MAIN", *(sub_account(t) for t in sub_types), "TOOLS", "MONITOR")


# The accounts of a deployment whose runs have the one default sub-agent type.
ACCOUNTS = accounts_of()


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
            if not ACCOUNT_NAME.fullmatch(account):
                raise ValueError(
                    f"crossing {self.subject!r}: unknown account {account!r} (accounts: MAIN, TOOLS, MONITOR, SUB and "
                    "SUB_<TYPE>)"
                )
        if self.source in self.into:
            raise ValueError(f"crossing {self.subject!r}: {self.source} cannot import its own subject")


def _per_type(
    names: Subjects,
    accounts: dict[str, str],
    subject_of: Callable[[str], str],
    service: bool,
    into_main: bool,
    why: str,
) -> list[Crossing]:
    """One crossing per sub-agent type (`accounts`: its account by type) of its subject `subject_of(type)` (one of
    `names`' methods): from the type's account into MAIN (`into_main`), or from MAIN into the type's account."""
    out = []
    for sub_type, account in accounts.items():
        source, into = (account, ("MAIN",)) if into_main else ("MAIN", (account,))
        subject = names.relative(subject_of(sub_type))
        out.append(Crossing(subject, service, source, into, why.format(type=sub_type)))
    return out


def crossings(sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)) -> tuple[Crossing, ...]:
    """Everything that crosses in a run whose sub-agent types are `sub_types` (docs/architecture.md: subtask requests
    and results, the scalar reward statistics, and the step events the other side needs; tools serve every side;
    the monitor watches every account). Each sub-agent type's side crosses with MAIN only, never with another
    type's side. Trajectories, batches, weights and their KV/object stores cross nothing."""
    names = Subjects("r", sub_types)  # the run id is a stand-in: crossings are relative to it
    by_type = {t: sub_account(t) for t in sub_types}
    subs = tuple(by_type.values())
    return (
        *_per_type(names, by_type, names.subtask_requests_of, True, True, "main agents delegate subtasks to {type}"),
        Crossing("tool.*", True, "TOOLS", ("MAIN", *subs), "every side's agents call the tools"),
        *_per_type(
            names,
            by_type,
            names.reward_stats_of,
            False,
            False,
            "{type}'s aligner: scalar reward statistics (R_M, r_format, r_correct, its sub-call ids)",
        ),
        Crossing("step.start", False, "MAIN", subs, "the sub-aligners' step plans (from the controller)"),
        *_per_type(names, by_type, names.step_aligned, False, True, "the controller hears {type}'s batch is ready"),
        *_per_type(
            names, by_type, names.step_done, False, True, "the controller hears {type}'s learner applied a step"
        ),
        Crossing(
            "events",
            False,
            "MAIN",
            (*subs, "TOOLS", "MONITOR"),
            "run.finished stops every node; the monitor shows the events",
        ),
        *(Crossing("events", False, a, ("MONITOR",), "the monitor shows a sub side's events") for a in subs),
        Crossing("events", False, "TOOLS", ("MONITOR",), "the monitor shows the tools' events"),
        Crossing("metrics.>", False, "MAIN", ("MONITOR",), "the monitor's metrics"),
        *(Crossing("metrics.>", False, a, ("MONITOR",), "the monitor's metrics") for a in subs),
        Crossing("metrics.>", False, "TOOLS", ("MONITOR",), "the monitor's metrics"),
        Crossing("query.done", False, "MAIN", ("MONITOR",), "the monitor's query progress"),
    )


# What crosses in a run with the one default sub-agent type.
CROSSINGS: tuple[Crossing, ...] = crossings()


def crossings_out_of(account: str, run_crossings: Iterable[Crossing] = CROSSINGS) -> list[Crossing]:
    """What `account` exports."""
    return [c for c in run_crossings if c.source == account]


def crossings_into(account: str, run_crossings: Iterable[Crossing] = CROSSINGS) -> list[Crossing]:
    """What `account` imports."""
    return [c for c in run_crossings if account in c.into]


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


def _entries(
    account: str, run_ids: list[str], exported: bool, reply_window_s: float, run_crossings: Iterable[Crossing]
) -> list[str]:
    chosen = crossings_out_of(account, run_crossings) if exported else crossings_into(account, run_crossings)
    return [
        _entry(c, f"{Subjects(run_id).root}.{c.subject}", exported, reply_window_s)
        for c in chosen
        for run_id in run_ids
    ]


def account_block(
    account: str,
    user_blocks: list[str],
    run_ids: list[str],
    reply_window_s: float = DEFAULT_REPLY_WINDOW_S,
    run_crossings: Iterable[Crossing] = CROSSINGS,
) -> str:
    """One account of the `accounts { … }` section: JetStream, its users (rendered), exports, imports (of
    `run_crossings`, rendered for each of `run_ids`)."""
    lines = [f"  {account}: {{", "    jetstream: enabled", "    users: [", ",\n".join(user_blocks), "    ]"]
    for key, entries in (
        ("exports", _entries(account, run_ids, True, reply_window_s, run_crossings)),
        ("imports", _entries(account, run_ids, False, reply_window_s, run_crossings)),
    ):
        if entries:
            lines.append(f"    {key}: [")
            lines.append(",\n".join(f"      {entry}" for entry in entries))
            lines.append("    ]")
    lines.append("  }")
    return "\n".join(lines)


def accounts_section(
    users_by_account: Mapping[str, list[str]],
    run_ids: list[str],
    reply_window_s: float = DEFAULT_REPLY_WINDOW_S,
    sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,),
) -> str:
    """The whole `accounts { … }` section from each account's rendered user blocks, for runs whose sub-agent types
    are `sub_types`."""
    run_crossings = crossings(sub_types)
    blocks = [
        account_block(account, users_by_account.get(account, []), run_ids, reply_window_s, run_crossings)
        for account in accounts_of(sub_types)
    ]
    return "accounts {\n" + "\n".join(blocks) + "\n}"
