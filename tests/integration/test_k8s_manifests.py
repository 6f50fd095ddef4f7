"""`kubectl kustomize deploy/k8s` renders offline (issue 11), and what it renders runs every role the
way docs/deployment.md says: one workload per role (learners as StatefulSets with a checkpoint volume),
probes and resource requests on every container, the role's own credentials from its own Secret
(never a credential in the manifests), and tools autoscaled."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from actors.roles import ROLES
from tests.helpers import REPO

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed on this machine: the kustomize base cannot be rendered here")
    done = subprocess.run(
        [kubectl, "kustomize", str(REPO / "deploy" / "k8s")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _workloads(docs: list[dict]) -> dict[str, dict]:
    return {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: d
        for d in docs
        if d["kind"] in ("Deployment", "StatefulSet")
    }


def test_every_role_runs_as_its_own_workload_with_probes_and_requests(rendered):
    workloads = _workloads(rendered)
    assert sorted(workloads) == sorted(ROLES)
    for role, workload in workloads.items():
        assert workload["kind"] == ("StatefulSet" if role.endswith("-learner") else "Deployment"), role
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        command = container["command"]
        assert command[command.index("--role") + 1] == role
        assert f"/etc/mgrpo/nats/nodes/{role}.yaml" in command and "--health-file" in command
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert probe in container, (role, probe)
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), role
        secrets = [v["secret"]["secretName"] for v in workload["spec"]["template"]["spec"]["volumes"] if "secret" in v]
        assert secrets == [f"mgrpo-nats-{role}"], role  # its own credentials only


def test_learners_keep_checkpoints_on_a_volume_and_tools_autoscale(rendered):
    workloads = _workloads(rendered)
    for side in ("main", "sub"):
        claims = workloads[f"{side}-learner"]["spec"]["volumeClaimTemplates"]
        assert [c["metadata"]["name"] for c in claims] == ["checkpoints"]
    (hpa,) = [d for d in rendered if d["kind"] == "HorizontalPodAutoscaler"]
    assert (
        hpa["spec"]["scaleTargetRef"]["name"] == workloads["tool"]["metadata"]["name"]
        and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    )


def test_no_credential_is_written_in_the_manifests(rendered):
    # Secrets are created from deploy/nats/generated, never committed
    assert not [d for d in rendered if d["kind"] == "Secret"]
    text = yaml.safe_dump_all(rendered)
    for word in ("password:", "passwd", "token:", "BEGIN PRIVATE KEY", "BEGIN CERTIFICATE"):
        assert word not in text, word
    for workload in _workloads(rendered).values():
        for env in workload["spec"]["template"]["spec"]["containers"][0].get("env", []):
            assert "value" not in env or not any(
                k in env["name"].lower() for k in ("pass", "token", "secret", "key")
            ), env
