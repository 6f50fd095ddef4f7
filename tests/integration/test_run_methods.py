"""The run methods and the alignment ablation (issue: "Run modes from config"), each as `mgrpo run`
for 2 steps in a real process (every role over an embedded nats-server, real DeepSpeed learners on the
tiny models), driven by the rule policy (tests/pipeline_policy.py) so agents really delegate and call
tools. What each method must and must not do is read from the run's output, its summary.json and the
node's delivery audit (every message it received)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import REPO, expected_trained_line, run_script
from tests.pipeline_helpers import pipeline_config, received

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

B, K, D = 3, 2, 2
RULE_POLICY_ENV = {"PYTHONPATH": str(REPO)}  # the rule policy engine is imported from tests/


def _run(tmp_path: Path, *args: str, **sections: dict) -> tuple[str, dict, Counter]:
    """`mgrpo run` on the rule policy; its output, summary.json and the types of messages it received."""
    sections.setdefault("learners", {"main": {"frozen": False}, "sub": {"frozen": False}})  # both train
    config = pipeline_config(tmp_path, "methods", pipeline={"advance_on": "learners"}, **sections)
    done = run_script("mgrpo", "run", "--config", str(config), *args, timeout_s=280, env=RULE_POLICY_ENV)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "methods" / "summary.json").read_text())
    types = Counter(record["type"] for record in received(tmp_path / "deliveries", "run"))
    return " ".join(done.stdout.split()), summary, types  # rich wraps long lines: compare on single spaces


def test_single_agent_trains_one_agent_with_every_tool_and_no_sub_side(tmp_path):
    out, summary, types = _run(tmp_path, "--method", "single-agent")
    assert "run 'methods' (single-agent): one agent with every tool, tiny:main" in out
    assert "roles on an embedded nats-server: tool, main-aligner, main-agent, main-learner, controller 2 steps" in out
    assert out.count(f"main batch: {B * K} samples") == 2 and "sub batch" not in out
    assert expected_trained_line(out, ("main",), ("main",)) in out and "frozen" not in out
    assert [row["main_version"] for row in summary["steps"]] == [1.0, 2.0]
    # The single agent's search and visit went to the tool actors; nothing went to a sub-agent.
    assert types["ToolRequest"] > 0 and types["SubtaskRequest"] == 0 and types["AlignedBatch"] > 0
    assert all(row["sub_version"] is None for row in summary["steps"])


def test_main_only_keeps_the_sub_agent_frozen(tmp_path):
    out, summary, types = _run(tmp_path, "--method", "main-only")
    assert "run 'methods' (main-only): M tiny:main, S tiny:sub" in out
    assert (
        "roles on an embedded nats-server: tool, sub-agent, sub-aligner, main-aligner, main-agent, main-learner, "
        "controller 2 steps"
    ) in out
    assert out.count(f"sub batch: {B * K * D} samples") == 2  # S's batches are still aligned, just not trained on
    assert expected_trained_line(out, ("main", "sub"), ("main",)) in out and "frozen: sub" in out
    assert [row["main_version"] for row in summary["steps"]] == [1.0, 2.0]
    assert all(row["sub_version"] is None for row in summary["steps"])
    assert types["SubtaskRequest"] > 0


def test_a_sub_learner_is_refused_when_the_method_does_not_train_s(tmp_path):
    config = pipeline_config(tmp_path, "methods", learners={"main": {"frozen": False}, "sub": {"frozen": False}})
    for method, why in (("main-only", "run.method is main-only"), ("single-agent", "run.method is single-agent")):
        done = run_script(
            "mgrpo-node",
            "--config",
            str(config),
            "--set",
            f"run.method={method}",
            "--role",
            "sub-learner",
            timeout_s=60,
        )
        assert done.returncode == 2 and why in done.stderr, done.stderr[-2000:]
    done = run_script(
        "mgrpo-node", "--config", str(config), "--set", "run.method=single-agent", "--role", "sub-agent", timeout_s=60
    )
    assert done.returncode == 2 and "no sub-agent" in done.stderr


def test_alignment_none_takes_the_sub_batch_from_a_queue_across_steps(tmp_path):
    # D = 1: B·K slots. The rule policy's M delegates once or twice per valid rollout, so a step may leave calls
    # for the next; whatever it does, each batch takes the queue's leftovers first, then the step's own calls,
    # no slot is a duplicate, the rest are placeholders, and at most one step's worth waits.
    out, summary, _ = _run(tmp_path, "--set", "algo.alignment.mode=none", "--set", "algo.alignment.d=1")
    slots = B * K
    assert out.count(f"sub batch: {slots} samples") == 2
    queued = 0
    for row in summary["steps"]:
        waiting = queued + row["sub_calls"]
        assert row["duplicates"] == 0 and row["carried"] == min(queued, slots)
        assert row["sub_calls"] > 0 and row["placeholders"] == slots - min(waiting, slots)
        queued = min(max(0, waiting - slots), slots)
        assert row["queued"] == queued and row["dropped"] == max(0, waiting - 2 * slots)
        assert row["sub_version"] is not None
    assert expected_trained_line(out, ("main", "sub"), ("main", "sub")) in out
