"""Several sub-agent types under the deployment's own accounts (issue 22): `mgrpo deploy nats-config` with
`sub_types: [searcher, calculator]` renders an account per type (SUB_SEARCHER, SUB_CALCULATOR) beside MAIN, TOOLS
and MONITOR, with only that type's subtask service, reward statistics and step events crossing to MAIN, and in
each a user per role of that type (`searcher-agent`, `searcher-aligner`, `searcher-learner`, …). Each account is
provisioned by its admin, given the run's config (its types); then every role of every side runs as its own
process under its own user over TLS, learners included, for 2 steps. Checked: every side's learner applies every
step, each type's batches (read as that type's tap user, in that type's account) hold exactly B·K·D samples, a
type's admin made only its own type's streams and buckets, and the server log shows no permission the pipeline
needed and lacked."""

from __future__ import annotations

import pytest
import yaml

from actors.roles import SUB_SIDE_ROLES, role_user
from mgrpo_actors.deploy.accounts import accounts_of, sub_account
from mgrpo_actors.deploy.server_config import TAP_USER, admin_user, tap_user
from mgrpo_actors.runtime import Bus
from protocols import AlignedBatch, StepDone
from tests.deploy_helpers import node_config, render, secure_server, user_security
from tests.helpers import run_script
from tests.pipeline_helpers import EventLog, NodeProcesses, read_stream, two_type_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(500)]

B, K, D, STEPS = 2, 2, 2, 2
RUN_ID = "secure-types"
TYPES = ("searcher", "calculator")
# node name = the NATS user it runs as -> (role, extra arguments)
TOPOLOGY: dict[str, tuple[str, tuple[str, ...]]] = {
    "tool": ("tool", ()),
    **{role_user(role, t): (role, ("--sub-type", t)) for t in TYPES for role in SUB_SIDE_ROLES},
    "main-agent": ("main-agent", ()),
    "main-aligner": ("main-aligner", ()),
    "main-learner": ("main-learner", ()),
    "controller": ("controller", ()),
}


def test_two_sub_agent_types_run_each_in_its_own_account_under_per_role_users(tmp_path):
    out = render(tmp_path, RUN_ID, sub_types=list(TYPES))
    server = secure_server(out)
    url = server.url.replace("nats://", "tls://")
    learner = {"lr": 1e-2, "zero_stage": 2, "micro_batch_samples": 4, "checkpoint_every": 0}
    config = two_type_config(
        tmp_path,
        RUN_ID,
        (B, K, D, STEPS),
        pipeline={"advance_on": "learners"},
        learners={"main": learner, "sub": learner},
    )
    base = yaml.safe_load(config.read_text())
    try:
        for account in accounts_of(TYPES):
            admin = node_config(tmp_path, out, admin_user(account), base)
            done = run_script(
                "mgrpo", "deploy", "provision", "--config", str(admin), "--nats", url, "--run-id", RUN_ID, timeout_s=60
            )
            assert done.returncode == 0 and f"account {account}" in done.stdout, done.stdout + done.stderr
            assert f"(sub-agent types {', '.join(sorted(TYPES))})" in done.stdout, done.stdout  # read from the config
            made = done.stdout.split(f"account {account}:", 1)[1]
            for sub_type in TYPES:  # a type's buckets and durables are made in its account only
                assert (sub_type in made) == (account == sub_account(sub_type)), (account, done.stdout)

        monitor_tap = user_security(out, TAP_USER, url)
        with Bus(url, run_id=RUN_ID, node="watcher", sub_types=TYPES, security=monitor_tap) as bus:
            events = EventLog(bus)
            nodes = NodeProcesses(url, config, tmp_path / "logs")
            try:
                for user, (role, extra) in TOPOLOGY.items():
                    nodes.start(user, role, extra=extra, config=node_config(tmp_path, out, user, base))
                events.wait_for("run.finished", timeout_s=400, describe=lambda: nodes.tails() + server.log_tail(40))
            finally:
                codes = nodes.stop_all()
            assert all(code == 0 for code in codes.values()), (codes, nodes.tails())

        main_tap = user_security(out, tap_user("MAIN"), url)
        with Bus(url, run_id=RUN_ID, node="watcher-main", sub_types=TYPES, security=main_tap) as main_side:
            # MAIN's steps stream holds every type's step events: they crossed (each type's account exports its own).
            done_steps = [
                m for m in read_stream(main_side, main_side.subjects.stream("steps")) if isinstance(m, StepDone)
            ]
        for side in ("main", *TYPES):
            assert sorted(d.step for d in done_steps if d.side == side) == list(range(STEPS)), side
        for sub_type in TYPES:
            type_tap = user_security(out, tap_user(sub_account(sub_type)), url)
            with Bus(url, run_id=RUN_ID, node=f"watcher-{sub_type}", sub_types=TYPES, security=type_tap) as bus:
                batches = [
                    m for m in read_stream(bus, bus.subjects.stream(f"batch-{sub_type}")) if isinstance(m, AlignedBatch)
                ]
            assert len(batches) == STEPS and all(len(b.sample_ids) == B * K * D for b in batches), (
                sub_type,
                [len(b.sample_ids) for b in batches],
            )
        log = (server.store_dir / "nats-server.log").read_text()
        violations = [line for line in log.splitlines() if "Violation" in line]  # "Publish Violation", …
        assert not violations, "\n".join(violations[:20])
    finally:
        server.stop()
