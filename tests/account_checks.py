"""What the account tests share (tests/unit/deploy/test_accounts*.py): which roles live in an account, what they
publish, answer and call, and the checks every run's accounts must pass whatever its sub-agent types: each crossing
has its two ends, each subscription and call of a role finds its other end, no subject crosses both ways between two
accounts, and nothing of a side's own data crosses. Each takes the run's role accesses (user -> RoleAccess, from
`actors.roles.role_accesses(types)`) and its crossings or accounts explicitly; the default type passes
`role_accesses()` with CROSSINGS and ACCOUNTS."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from mgrpo_actors.deploy.access import RoleAccess, common_access, subject_matches
from mgrpo_actors.deploy.accounts import Crossing, crossings_into, crossings_out_of
from protocols import DEFAULT_SUB_TYPE, Subjects

__all__ = [
    "MIX",
    "TWO",
    "TYPE_SETS",
    "assert_crossing_has_both_ends",
    "assert_every_subscription_finds_its_other_end",
    "assert_no_side_data_crosses",
    "assert_no_subject_crosses_both_ways",
    "types_id",
]

Accesses = Mapping[str, RoleAccess]

COMMON = common_access()

# The sub-agent type sets the several-types tests run over: two named types, and a mix with the default type.
TWO = ("searcher", "calculator")
MIX = ("sub", "calc")
TYPE_SETS = [TWO, MIX]


def types_id(types: tuple[str, ...]) -> str:
    """A test id naming a type set."""
    return "+".join(types)


def roles_of(accesses: Accesses, account: str) -> list[str]:
    """The role users living in `account`."""
    return [name for name, access in accesses.items() if access.account == account]


def published_in(accesses: Accesses, account: str) -> list[str]:
    """Subjects (relative) the roles of `account` publish, every node's common ones included."""
    return [*COMMON.publish, *(rel for name in roles_of(accesses, account) for rel in accesses[name].publish)]


def served_in(accesses: Accesses, account: str) -> list[str]:
    """Subjects (relative) the roles of `account` subscribe to (and so answer, for a service)."""
    return [rel for name in roles_of(accesses, account) for rel in accesses[name].subscribe]


def covers(patterns: Iterable[str], subject: str) -> bool:
    """Some pattern matches `subject`, or `subject` is itself a wildcard a pattern equals."""
    return any(p == subject or subject_matches(p, subject) for p in patterns)


def assert_crossing_has_both_ends(
    accesses: Accesses, crossing: Crossing, sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)
) -> None:
    """A stream crossing is published in its source and read in every importer (a subscription, a durable or a
    replay of a stream holding it); a service is answered in its source and called from every importer.
    `sub_types` are the run's (they name its streams)."""
    if crossing.service:
        assert covers(served_in(accesses, crossing.source), crossing.subject), crossing
        for account in crossing.into:
            callers = [rel for name in roles_of(accesses, account) for rel in accesses[name].requests]
            assert covers(callers, crossing.subject), (account, crossing.subject)
        return
    assert covers(published_in(accesses, crossing.source), crossing.subject), crossing
    s = Subjects("r", sub_types)
    subject = f"{s.root}.{crossing.subject}"
    for account in crossing.into:
        readers: list[str] = []
        for name in roles_of(accesses, account):
            access = accesses[name]
            readers += [f"{s.root}.{rel}" for rel in (*access.subscribe, *COMMON.subscribe)]
            for stream in (*(d for d, _ in access.durables), *access.replays):
                readers += s.streams()[s.stream(stream)]
        assert any(subject_matches(r, subject) or subject_matches(subject, r) for r in readers), (
            account,
            crossing.subject,
        )


def assert_every_subscription_finds_its_other_end(
    accesses: Accesses, account: str, crossings: Sequence[Crossing]
) -> None:
    """`account` has roles; what each subscribes to is published in the account, crosses into it, or is a service it
    answers for callers in the account or in the accounts it exports it to; what each calls is answered in the
    account or crosses into it as a service."""
    roles = roles_of(accesses, account)
    assert roles, account
    arriving = [c.subject for c in crossings_into(account, crossings)]
    services_in = [c.subject for c in crossings_into(account, crossings) if c.service]
    callers_here = [rel for name in roles for rel in accesses[name].requests]
    exported_services = [c.subject for c in crossings_out_of(account, crossings) if c.service]
    published, served = published_in(accesses, account), served_in(accesses, account)
    for name in roles:
        for rel in accesses[name].subscribe:
            assert covers(published, rel) or rel in arriving or rel in callers_here or rel in exported_services, (
                name,
                rel,
            )
        for rel in accesses[name].requests:
            assert covers(served, rel) or rel in services_in, (name, rel)


def _probe(subject: str) -> str:
    """A literal subject that `subject` (maybe a wildcard) matches."""
    return subject.replace("*", "t").replace(">", "t")


def assert_no_subject_crosses_both_ways(accounts: Iterable[str], crossings: Sequence[Crossing]) -> None:
    """nats-server refuses to start when an import forms a cycle: between any two of `accounts` the subjects that
    cross one way never overlap those that cross the other way."""
    accounts = tuple(accounts)
    for a in accounts:
        for b in accounts:
            there = [c.subject for c in crossings_out_of(a, crossings) if b in c.into]
            back = [c.subject for c in crossings_out_of(b, crossings) if a in c.into]
            for x in there:
                for y in back:
                    assert not (subject_matches(x, _probe(y)) or subject_matches(y, _probe(x))), (a, b, x, y)


def assert_no_side_data_crosses(crossings: Iterable[Crossing]) -> None:
    """docs/architecture.md §Sides and what crosses them: no trajectories, batches, weights, dead letters, pings
    or JetStream API subjects cross."""
    for crossing in crossings:
        head = crossing.subject.split(".")[0]
        assert head not in ("traj", "batch", "weights", "dlq", "node") and not crossing.subject.startswith("$"), (
            crossing
        )
