"""The server, not a convention, keeps each role to its part and each side to itself (issue 11). On a real
nats-server with the rendered deployment (TLS; the accounts MAIN, SUB, TOOLS, MONITOR; a user per role;
read-only tap users), a client without credentials and every user try to publish fake batches, weights,
trajectories, stats, step events and rollout requests, to write the run state and the weights' KV
keys and object store, to subscribe to both sides' trajectories and batches, and to open consumers on
them: every attempt on something its user may not touch is refused by the server (100 %, counted and
printed), and afterwards the batch, trajectory and stats streams are still empty, so no learner could
ever have seen a forged one. Then each account's admin, unrestricted inside its own account, forges
the other side's messages: none of them reaches another account (its streams unchanged, its
subscribers saw nothing)."""

from __future__ import annotations

import asyncio

import nats
import pytest

from actors.roles import ROLES, role_accesses
from mgrpo_actors.deploy.access import permissions
from mgrpo_actors.deploy.accounts import ACCOUNTS
from mgrpo_actors.deploy.description import DeploymentDescription
from mgrpo_actors.deploy.server_config import TAP_USER, admin_user, tap_user, user_specs
from mgrpo_actors.runtime import Bus
from protocols import Subjects
from protocols.durables import DURABLES
from tests.deploy_helpers import node_config, render, secure_server, user_security
from tests.helpers import run_script

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RUN_ID = "guarded"


def targets(s: Subjects) -> tuple[list[str], list[str]]:
    """(subjects to publish forged messages on, subjects to subscribe to) of run `s`."""
    state, weights = s.bucket("state-main"), s.bucket("versions-main")
    publish = [
        *(
            subject
            for side in ("main", "sub")
            for subject in (
                s.trajectories(side),
                s.batches(side),
                s.weights(side),
                s.step_aligned(side),
                s.step_done(side),
            )
        ),
        s.reward_stats,
        s.step_start,
        s.rollout_requests,
        f"$KV.{state}.learner.main",
        f"$KV.{s.bucket('state')}.controller.cursor",
        f"$KV.{weights}.latest.main",
        f"$KV.{s.bucket('versions-sub')}.latest.sub",
        *(
            f"$JS.API.STREAM.MSG.GET.KV_{s.bucket(what)}"
            for what in ("state-main", "state-sub", "versions-main", "versions-sub")
        ),
        f"$O.{s.bucket('weights-main')}.C.forged",
        f"$O.{s.bucket('weights-sub')}.C.forged",
        *(
            f"$JS.API.CONSUMER.CREATE.{s.stream(what)}"
            for what in ("traj-main", "traj-sub", "batch-main", "batch-sub", "stats")
        ),
        *(f"$JS.API.CONSUMER.CREATE.OBJ_{s.bucket(f'weights-{side}')}" for side in ("main", "sub")),
        *(f"$JS.API.CONSUMER.CREATE.{s.stream(spec.stream)}.{spec.name}" for spec in DURABLES.values()),
        *(f"$JS.API.CONSUMER.DURABLE.CREATE.{s.stream(spec.stream)}.{spec.name}" for spec in DURABLES.values()),
        *(f"$JS.API.STREAM.MSG.GET.{s.stream(what)}" for what in ("traj-main", "traj-sub", "batch-main", "batch-sub")),
        "$JS.API.STREAM.CREATE.forged",
        f"$JS.API.STREAM.DELETE.{s.stream('batch-main')}",
    ]
    subscribe = [
        s.trajectories("main"),
        s.trajectories("sub"),
        s.batches("main"),
        s.batches("sub"),
        s.reward_stats,
        "mgrpo.>",
        "_INBOX.>",
    ]
    return publish, subscribe


async def attack(url: str, security, publish: list[str], subscribe: list[str]) -> set[str]:  # noqa: ANN001
    """Publish a forged message on each of `publish`, subscribe to each of `subscribe`; returns the
    subjects the server refused (its permission errors), lower-cased as nats-py reports them."""
    refused: set[str] = set()

    async def on_error(exc: Exception) -> None:
        text = str(exc)
        if "permissions violation" in text:
            refused.add(text.split('"')[1].lower())

    nc = await nats.connect(url, error_cb=on_error, allow_reconnect=False, **security.nats_options())
    try:
        for subject in publish:
            await nc.publish(subject, b"forged")
        for subject in subscribe:
            await nc.subscribe(subject)
        await nc.flush()
        for _ in range(50):  # the errors arrive after the flush
            if len(refused) >= len(publish) + len(subscribe):
                break
            await asyncio.sleep(0.05)
        assert nc.is_connected  # a refused attempt does not cost the user its connection
    finally:
        await nc.close()
    return refused


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """The rendered deployment's server, provisioned for RUN_ID: (output dir, TLS URL, server)."""
    tmp = tmp_path_factory.mktemp("guarded")
    out = render(tmp, RUN_ID)
    server = secure_server(out)
    url = server.url.replace("nats://", "tls://")
    try:
        for account in ACCOUNTS:
            admin = node_config(tmp, out, admin_user(account), {})
            assert (
                run_script(
                    "mgrpo",
                    "deploy",
                    "provision",
                    "--config",
                    str(admin),
                    "--nats",
                    url,
                    "--run-id",
                    RUN_ID,
                    timeout_s=60,
                ).returncode
                == 0
            )
        yield out, url, server
    finally:
        server.stop()


def test_every_user_is_refused_every_subject_its_role_must_not_touch(deployment):
    out, url, server = deployment
    s = Subjects(RUN_ID)
    accesses = role_accesses()
    users = {u.name: u for u in user_specs(DeploymentDescription(run_ids=[RUN_ID]), accesses)}
    publish, subscribe = targets(s)
    attempts = refused_total = 0
    taps = [tap_user(account) for account in ACCOUNTS]
    for name in [*ROLES, *taps]:
        allowed = users[name].permissions
        if name in ROLES:
            assert allowed == permissions(accesses[name], RUN_ID, f"_INBOX.{name}")
        forbidden_pub = [subject for subject in publish if not allowed.may_publish(subject)]
        forbidden_sub = [subject for subject in subscribe if not allowed.may_subscribe(subject)]
        refused = asyncio.run(attack(url, user_security(out, name, url), forbidden_pub, forbidden_sub))
        expected = {subject.lower() for subject in [*forbidden_pub, *forbidden_sub]}
        assert expected <= refused, (name, sorted(expected - refused))
        attempts += len(expected)
        refused_total += len(expected & refused)
    # Without credentials nobody gets a connection at all.
    from mgrpo_actors.runtime.security import ConnectSecurity

    anonymous = user_security(out, TAP_USER, url)
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        asyncio.run(attack(url, ConnectSecurity(tls=anonymous.tls, tls_handshake_first=True), publish, subscribe))
    print(
        f"{attempts} forbidden attempts by {len(ROLES) + len(taps)} users: {refused_total} refused by the server; "
        f"a client without credentials: refused at connect"
    )
    assert refused_total == attempts

    # Nothing forged landed where a learner or an aligner reads, on either side.
    for account, streams in (
        ("MAIN", ("traj-main", "batch-main", "stats", "steps", "rollouts")),
        ("SUB", ("traj-sub", "batch-sub", "stats", "steps")),
    ):
        with Bus(url, run_id=RUN_ID, node="auditor", security=user_security(out, admin_user(account), url)) as bus:
            for what in streams:
                assert bus.stream_info(s.stream(what)).state.messages == 0, (account, what)
    log = (server.store_dir / "nats-server.log").read_text()
    assert log.count("Violation") >= attempts  # the server logged each refusal


async def _redirect(url: str, security, publish: str, stream: str, deliver_to: str, publish_first: bool = True) -> None:  # noqa: ANN001
    """Publish one message on `publish` (captured by `stream`; unless not `publish_first`), then ask the
    server for a consumer that delivers it onto `deliver_to` (nats-server does not check a consumer's
    delivery subject against its creator's permissions: only not letting roles create consumers stops it)."""
    from nats.js.api import ConsumerConfig, DeliverPolicy

    nc = await nats.connect(url, allow_reconnect=False, **security.nats_options())
    try:
        if publish_first:
            await nc.publish(publish, b"forged batch")
            await nc.flush()
        config = ConsumerConfig(
            name="redirect", deliver_subject=deliver_to, deliver_policy=DeliverPolicy.ALL, filter_subject=publish
        )
        await nc.jetstream().add_consumer(stream, config)
        await asyncio.sleep(1.0)
    finally:
        await nc.close()


def _refused(server, user: str, subject_prefix: str) -> bool:  # noqa: ANN001
    """The server logged a publish violation of `user` on a subject starting with `subject_prefix`."""
    log = (server.store_dir / "nats-server.log").read_text()
    # e.g. … - "SUB/user:sub-learner" - Publish Violation - Subject "$JS.API.CONSUMER.CREATE.OBJ_…"
    return any(
        "Publish Violation" in line and f'/user:{user}"' in line and f'Subject "{subject_prefix}' in line
        for line in log.splitlines()
    )


def test_a_consumer_redirect_cannot_reach_another_account(deployment):
    """MONITOR's admin (who may create consumers, unlike every role) has a consumer deliver a metric onto
    batch.sub: the delivery stays inside MONITOR, where no stream keeps batches, and the sub side's batch
    stream stays empty (in a single account this reached it: measured before the accounts)."""
    out, url, _ = deployment
    s = Subjects(RUN_ID)
    asyncio.run(
        _redirect(
            url,
            user_security(out, admin_user("MONITOR"), url),
            s.metrics("forged"),
            s.stream("metrics"),
            s.batches("sub"),
        )
    )
    with Bus(url, run_id=RUN_ID, node="auditor", security=user_security(out, admin_user("SUB"), url)) as bus:
        assert bus.stream_info(s.stream("batch-sub")).state.messages == 0


def test_a_role_cannot_have_the_server_deliver_into_its_own_sides_batch_stream(deployment):
    """The sub learner's user writes its object store; before its object reads went through message
    gets it could also open a consumer there and have its own chunk delivered onto batch.sub. Now the
    server refuses the consumer, and the batch stream stays empty."""
    out, url, server = deployment
    s = Subjects(RUN_ID)
    bucket = s.bucket("weights-sub")
    with pytest.raises(nats.errors.TimeoutError):  # nats-py sees the refused API request as a timeout
        asyncio.run(
            _redirect(
                url, user_security(out, "sub-learner", url), f"$O.{bucket}.C.forged", f"OBJ_{bucket}", s.batches("sub")
            )
        )
    assert _refused(server, "sub-learner", f"$JS.API.CONSUMER.CREATE.OBJ_{bucket}")
    with Bus(url, run_id=RUN_ID, node="auditor", security=user_security(out, admin_user("SUB"), url)) as bus:
        assert bus.stream_info(s.stream("batch-sub")).state.messages == 0


def test_a_tap_user_cannot_have_the_server_deliver_into_its_sides_batch_stream(deployment):
    """The read-only tap users read streams by direct gets: a consumer delivering a stored metric onto
    batch.sub is refused, and the batch stream stays empty."""
    out, url, server = deployment
    s = Subjects(RUN_ID)
    with Bus(
        url, run_id=RUN_ID, node="metrics", security=user_security(out, "sub-learner", url)
    ) as bus:  # a metric any sub-side node may publish
        bus.js_publish(s.metrics("forged"), b"forged batch")
    with pytest.raises(nats.errors.TimeoutError):
        asyncio.run(
            _redirect(
                url,
                user_security(out, tap_user("SUB"), url),
                s.metrics("forged"),
                s.stream("metrics"),
                s.batches("sub"),
                publish_first=False,
            )
        )
    assert _refused(server, tap_user("SUB"), f"$JS.API.CONSUMER.CREATE.{s.stream('metrics')}")
    with Bus(url, run_id=RUN_ID, node="auditor", security=user_security(out, admin_user("SUB"), url)) as bus:
        assert bus.stream_info(s.stream("batch-sub")).state.messages == 0


# A side's own subjects (relative to the run): what another account's users must never get into it.
SIDE_SUBJECTS = {
    "MAIN": (
        "traj.main",
        "batch.main",
        "weights.main",
        "step.aligned.main",
        "step.done.main",
        "stats",
        "step.start",
        "rollout.request",
        "query.done",
    ),
    "SUB": ("traj.sub", "batch.sub", "weights.sub", "step.aligned.sub", "step.done.sub"),
}


def _stream_counts(url: str, security) -> dict[str, int]:  # noqa: ANN001
    async def counts() -> dict[str, int]:
        nc = await nats.connect(url, allow_reconnect=False, **security.nats_options())
        try:
            return {info.config.name: info.state.messages for info in await nc.jetstream().streams_info()}
        finally:
            await nc.close()

    return asyncio.run(counts())


async def _forge_across(url: str, attacker, listeners: dict, subjects: list[str]) -> dict[str, list[str]]:  # noqa: ANN001
    """As `attacker`, publish a forged message on each of `subjects` while every account in `listeners`
    (account -> its tap user's security) listens to the whole run; returns what each listener saw."""
    seen: dict[str, list[str]] = {account: [] for account in listeners}
    connections = []
    try:
        for account, security in listeners.items():
            nc = await nats.connect(url, allow_reconnect=False, **security.nats_options())
            connections.append(nc)

            async def record(msg, account=account) -> None:  # noqa: ANN001
                if msg.data == b"forged across":
                    seen[account].append(msg.subject)

            await nc.subscribe(Subjects(RUN_ID).all, cb=record)
            await nc.flush()
        nc = await nats.connect(url, allow_reconnect=False, **attacker.nats_options())
        connections.append(nc)
        for subject in subjects:
            await nc.publish(subject, b"forged across")
        await nc.flush()
        await asyncio.sleep(1.0)
    finally:
        for nc in connections:
            await nc.close()
    return seen


def test_no_account_can_get_a_message_into_another_sides_account(deployment):
    """Each account's admin (no subject limits inside its own account) publishes forged trajectories,
    batches, weights announcements, step events, stats, rollout requests, KV and object-store writes on
    the other side's subjects: every other account's streams are unchanged and its listeners saw none."""
    out, url, _ = deployment
    s = Subjects(RUN_ID)
    admins = {account: user_security(out, admin_user(account), url) for account in ACCOUNTS}
    listeners = {account: user_security(out, tap_user(account), url) for account in ACCOUNTS}
    buckets = {"MAIN": ("state", "state-main", "versions-main"), "SUB": ("state-sub", "versions-sub")}
    forged = arrived = 0
    for attacker in ACCOUNTS:
        targets = [side for side in SIDE_SUBJECTS if side != attacker]
        subjects = [f"{s.root}.{rel}" for side in targets for rel in SIDE_SUBJECTS[side]]
        subjects += [f"$KV.{s.bucket(b)}.forged" for side in targets for b in buckets[side]]
        subjects += [f"$O.{s.bucket(f'weights-{side.lower()}')}.C.forged" for side in targets]
        others = [account for account in ACCOUNTS if account != attacker]
        before = {account: _stream_counts(url, admins[account]) for account in others}
        seen = asyncio.run(
            _forge_across(url, admins[attacker], {account: listeners[account] for account in others}, subjects)
        )
        after = {account: _stream_counts(url, admins[account]) for account in others}
        assert before == after, (
            attacker,
            {a: {k: v for k, v in after[a].items() if before[a].get(k) != v} for a in others},
        )
        assert not any(seen.values()), (attacker, seen)
        forged += len(subjects) * len(others)
        arrived += sum(len(v) for v in seen.values())
    print(f"{forged} forged (message, other account) pairs from 4 accounts' admins: {arrived} arrived")

    # The same listeners and counts see a crossing the accounts allow: MAIN's stats reach SUB's
    # listener and SUB's stream (the sub-aligner's scalars).
    before = _stream_counts(url, admins["SUB"])[s.stream("stats")]
    seen = asyncio.run(_forge_across(url, admins["MAIN"], {"SUB": listeners["SUB"]}, [s.reward_stats]))
    assert seen == {"SUB": [s.reward_stats]}
    assert _stream_counts(url, admins["SUB"])[s.stream("stats")] == before + 1


def test_a_node_whose_user_may_not_use_its_roles_streams_exits_3_at_once_naming_them(deployment, tmp_path):
    """A refused JetStream call looks like a timeout to nats-py; the node tells it apart (the server's
    permission error) and stops with exit 3 naming the call, instead of retrying it for half a minute."""
    import time

    out, url, _ = deployment
    # the tool's user, the controller's role
    wrong_user = node_config(tmp_path, out, "tool", {"tools": {"web_entities": 100}})
    started = time.monotonic()
    done = run_script(
        "mgrpo-node",
        "--role",
        "controller",
        "--config",
        str(wrong_user),
        "--nats",
        url,
        "--run-id",
        RUN_ID,
        timeout_s=90,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert "NATS refused stream info" in done.stderr and "may not do that" in done.stderr, done.stderr[-2000:]
    assert time.monotonic() - started < 30  # one API timeout (5 s), not five
