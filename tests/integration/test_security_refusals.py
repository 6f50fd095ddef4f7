"""The server, not a convention, keeps each role to its part (issue 11). On a real nats-server with the
rendered deployment (TLS, a user per role, a read-only `tap`), a client without credentials and every
user try to publish fake batches, weights, trajectories, stats, step events and rollout requests, to
write the run state and the weights' KV keys and object store, to subscribe to both sides'
trajectories and batches, and to open consumers on them: every attempt on something its user may not
touch is refused by the server (100 %, counted and printed), and afterwards the batch, trajectory and
stats streams are still empty, so no learner could ever have seen a forged one."""

from __future__ import annotations

import asyncio

import nats
import pytest

from actors.roles import ROLES
from mgrpo_actors.deploy.access import permissions
from mgrpo_actors.deploy.server_config import TAP_USER, user_specs
from mgrpo_actors.deploy.description import DeploymentDescription
from mgrpo_actors.runtime import Bus
from protocols import Subjects
from tests.deploy_helpers import node_config, render, secure_server, user_security
from tests.helpers import run_script

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RUN_ID = "guarded"


def targets(s: Subjects) -> tuple[list[str], list[str]]:
    """(subjects to publish forged messages on, subjects to subscribe to) of run `s`."""
    state, weights = s.bucket("state-main"), s.bucket("versions-main")
    publish = [
        *(subject for side in ("main", "sub") for subject in (s.trajectories(side), s.batches(side), s.weights(side), s.step_aligned(side), s.step_done(side))),
        s.reward_stats, s.step_start, s.rollout_requests,
        f"$KV.{state}.learner.main", f"$KV.{s.bucket('state')}.controller.cursor", f"$KV.{weights}.latest.main", f"$KV.{s.bucket('versions-sub')}.latest.sub",
        *(f"$JS.API.STREAM.MSG.GET.KV_{s.bucket(what)}" for what in ("state-main", "state-sub", "versions-main", "versions-sub")),
        f"$O.{s.bucket('weights-main')}.C.forged", f"$O.{s.bucket('weights-sub')}.C.forged",
        *(f"$JS.API.CONSUMER.CREATE.{s.stream(what)}" for what in ("traj-main", "traj-sub", "batch-main", "batch-sub", "stats")),
        *(f"$JS.API.STREAM.MSG.GET.{s.stream(what)}" for what in ("traj-main", "traj-sub", "batch-main", "batch-sub")),
        "$JS.API.STREAM.CREATE.forged", f"$JS.API.STREAM.DELETE.{s.stream('batch-main')}",
    ]  # fmt: skip
    subscribe = [s.trajectories("main"), s.trajectories("sub"), s.batches("main"), s.batches("sub"), s.reward_stats, "mgrpo.>", "_INBOX.>"]
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
        admin = node_config(tmp, out, "admin", {})
        assert run_script("mgrpo", "deploy", "provision", "--config", str(admin), "--nats", url, "--run-id", RUN_ID, timeout_s=60).returncode == 0
        yield out, url, server
    finally:
        server.stop()


def test_every_user_is_refused_every_subject_its_role_must_not_touch(deployment):
    out, url, server = deployment
    s = Subjects(RUN_ID)
    users = {u.name: u for u in user_specs(DeploymentDescription(run_ids=[RUN_ID]), {name: spec.nats_access for name, spec in ROLES.items()})}
    publish, subscribe = targets(s)
    attempts = refused_total = 0
    for name in [*ROLES, TAP_USER]:
        allowed = users[name].permissions
        if name in ROLES:
            assert allowed == permissions(ROLES[name].nats_access, RUN_ID, f"_INBOX.{name}")
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
    print(f"{attempts} forbidden attempts by {len(ROLES) + 1} users: {refused_total} refused by the server; "
          f"a client without credentials: refused at connect")  # fmt: skip
    assert refused_total == attempts

    # Nothing forged landed where a learner or an aligner reads.
    with Bus(url, run_id=RUN_ID, node="auditor", security=user_security(out, "admin", url)) as bus:
        for what in ("traj-main", "traj-sub", "batch-main", "batch-sub", "stats", "steps", "rollouts"):
            assert bus.stream_info(s.stream(what)).state.messages == 0, what
    log = (server.store_dir / "nats-server.log").read_text()
    assert log.count("Violation") >= attempts  # the server logged each refusal


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="known gap (README): nats-server does not check a consumer's delivery subject against its "
                                       "creator's publish permissions; strict, so closing the gap makes this test say so")  # fmt: skip
def test_a_role_cannot_have_the_server_deliver_into_the_other_sides_batch_stream(deployment):
    from nats.js.api import ConsumerConfig, DeliverPolicy

    out, url, _ = deployment
    s = Subjects(RUN_ID)

    async def redirect() -> None:  # as the monitor: one metric it may publish, a consumer delivering it onto batch.sub
        nc = await nats.connect(url, allow_reconnect=False, **user_security(out, "monitor", url).nats_options())
        try:
            await nc.publish(s.metrics("forged"), b"forged batch")
            await nc.flush()
            config = ConsumerConfig(name="redirect", deliver_subject=s.batches("sub"), deliver_policy=DeliverPolicy.ALL, filter_subject=s.metrics("forged"))
            await nc.jetstream().add_consumer(s.stream("metrics"), config)
            await asyncio.sleep(1.0)
        finally:
            await nc.close()

    asyncio.run(redirect())
    with Bus(url, run_id=RUN_ID, node="auditor", security=user_security(out, "admin", url)) as bus:
        assert bus.stream_info(s.stream("batch-sub")).state.messages == 0


def test_a_node_whose_user_may_not_use_its_roles_streams_exits_3_at_once_naming_them(deployment, tmp_path):
    """A refused JetStream call looks like a timeout to nats-py; the node tells it apart (the server's
    permission error) and stops with exit 3 naming the call, instead of retrying it for half a minute."""
    import time

    out, url, _ = deployment
    wrong_user = node_config(tmp_path, out, "tool", {"tools": {"web_entities": 100}})  # the tool's user, the controller's role
    started = time.monotonic()
    done = run_script("mgrpo-node", "--role", "controller", "--config", str(wrong_user), "--nats", url, "--run-id", RUN_ID, timeout_s=90)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "NATS refused stream info" in done.stderr and "may not do that" in done.stderr, done.stderr[-2000:]
    assert time.monotonic() - started < 30  # one API timeout (5 s), not five
