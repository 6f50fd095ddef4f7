"""The deployment's own NATS accounts and users in force (issue 11): `mgrpo deploy certs` + `nats-config`
render TLS, the accounts MAIN, SUB, TOOLS, MONITOR with only what may cross between them, and in each a
user per role with the subject permissions declared beside the roles (actors/roles.py); each account
is provisioned by its admin; then every role runs as its own process under its own user over TLS,
learners included, for 2 steps, and the result is that of a run without them: every step once per side,
batches of exactly B·K and B·K·D. The server log shows no permission the pipeline needed and lacked.
The test watches the run's events as the read-only `tap` (MONITOR: it sees every account's events) and
reads each side's streams as that side's read-only tap user."""

from __future__ import annotations

import pytest
import yaml

from mgrpo_actors.deploy.accounts import ACCOUNTS
from mgrpo_actors.deploy.server_config import TAP_USER, admin_user, tap_user
from mgrpo_actors.runtime import Bus
from protocols import AlignedBatch, StepDone
from tests.deploy_helpers import node_config, render, secure_server, user_security
from tests.helpers import run_script
from tests.pipeline_helpers import EventLog, NodeProcesses, pipeline_config, read_stream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

B, K, D, STEPS = 3, 2, 2, 2
RUN_ID = "secure"
TOPOLOGY = [
    "tool",
    "sub-agent",
    "main-agent",
    "main-aligner",
    "sub-aligner",
    "main-learner",
    "sub-learner",
    "controller",
]


def test_two_steps_run_under_tls_and_per_role_users_as_without_them(tmp_path):
    out = render(tmp_path, RUN_ID)
    server = secure_server(out)
    url = server.url.replace("nats://", "tls://")
    learner = {"lr": 1e-2, "zero_stage": 2, "micro_batch_samples": 4}
    base = yaml.safe_load(
        pipeline_config(
            tmp_path,
            RUN_ID,
            pipeline={"steps": STEPS, "advance_on": "learners"},
            learners={"main": learner, "sub": learner},
        ).read_text()
    )
    try:
        for account in ACCOUNTS:
            admin = node_config(tmp_path, out, admin_user(account), base)
            done = run_script(
                "mgrpo", "deploy", "provision", "--config", str(admin), "--nats", url, "--run-id", RUN_ID, timeout_s=60
            )
            assert done.returncode == 0 and f"account {account}" in done.stdout, done.stdout + done.stderr

        with Bus(url, run_id=RUN_ID, node="watcher", security=user_security(out, TAP_USER, url)) as bus:
            events = EventLog(bus)
            nodes = NodeProcesses(url, tmp_path / "unused.yaml", tmp_path / "logs")
            try:
                for role in TOPOLOGY:
                    nodes.start(role, role, config=node_config(tmp_path, out, role, base))
                events.wait_for(
                    "run.finished",
                    timeout_s=300,
                    describe=lambda: (
                        "\n".join(f"--- {r}\n{nodes.output(r)[-1500:]}" for r in TOPOLOGY) + server.log_tail(40)
                    ),
                )
            finally:
                codes = nodes.stop_all()
            assert all(code == 0 for code in codes.values()), codes

        with Bus(
            url, run_id=RUN_ID, node="watcher-main", security=user_security(out, tap_user("MAIN"), url)
        ) as main_side:
            # MAIN's steps stream holds the sub side's step events too: they crossed (SUB exports them).
            done_steps = [
                m for m in read_stream(main_side, main_side.subjects.stream("steps")) if isinstance(m, StepDone)
            ]
            for side in ("main", "sub"):
                assert sorted(d.step for d in done_steps if d.side == side) == list(range(STEPS)), side
            for side, size, account in (("main", B * K, "MAIN"), ("sub", B * K * D, "SUB")):
                with Bus(
                    url, run_id=RUN_ID, node=f"watcher-{side}", security=user_security(out, tap_user(account), url)
                ) as bus:
                    batches = [
                        m for m in read_stream(bus, bus.subjects.stream(f"batch-{side}")) if isinstance(m, AlignedBatch)
                    ]
                assert len(batches) == STEPS and all(len(b.sample_ids) == size for b in batches), (
                    side,
                    [len(b.sample_ids) for b in batches],
                )
        log = (server.store_dir / "nats-server.log").read_text()
        # "Publish Violation", "Subscription Violation"
        violations = [line for line in log.splitlines() if "Violation" in line]
        assert not violations, "\n".join(violations[:20])
    finally:
        server.stop()
