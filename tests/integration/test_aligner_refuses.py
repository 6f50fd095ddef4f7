"""An aligner aligns only pieces its step's plan asked for and its side's agents could have sent
(alignment/piece_checks.py; actors/aligner.py `admit`, `refuse`). On a real nats-server, this test plays the
controller and the agents of one step: `mgrpo-node --role sub-aligner` is sent forged RewardStats (one before the
plan, for a query the plan does not have; one counting more calls than it names) and forged sub trajectories (one
claiming the wrong query for a real call id, kept until the stats naming that call arrive; one whose call id is of
another attempt), then the step's real pieces; `--role main-aligner` is sent forged main trajectories (a score
outside [0, 1], a call id, a rollout the plan does not have), then the real ones. Every forged piece is
dead-lettered ("PieceCheck", with its reason), counted as `refused` and said in a `<side>.refused` event; the batch
holds exactly the real pieces (B·K·D, resp. B·K samples) and the node stops cleanly when the run finishes."""

from __future__ import annotations

import subprocess
import time
import uuid

import numpy as np
import pytest

from mgrpo_actors.agents.setup import load_task_questions
from mgrpo_actors.config import NodeConfig, load_config
from protocols import AlignedBatch, DeadLetter, Event, RewardStats, StepPlan, Trajectory, decode
from tests.pipeline_helpers import EventLog, NodeProcesses, pipeline_config, read_stream, received, side_batches

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FORGED_TOKENS = [7, 7, 7, 7, 7, 7]  # a forged trajectory's tokens, told apart from every real one's in the batch


def _attempt() -> str:
    return uuid.uuid4().hex[:12]  # as rollout/main.py new_attempt makes them


def _tokens(seed: int) -> list[int]:
    return [11 + seed, 12 + seed, 13 + seed, 20 + seed, 21 + seed, 22 + seed]


def _trajectory(run_id: str, side: str, query: str, k: int, attempt: str, tokens: list[int], **fields) -> Trajectory:  # noqa: ANN003
    n, prompt_len = len(tokens), 3
    mask = np.array([0] * prompt_len + [1] * (n - prompt_len), dtype=np.uint8)
    return Trajectory(
        run_id=run_id,
        side=side,
        step=0,
        query_id=query,
        rollout_index=k,
        call_id=fields.pop("call_id", ""),
        policy_version=0,
        token_ids=np.array(tokens, dtype=np.int32),
        loss_mask=mask,
        logprobs=np.where(mask == 1, -0.5, 0.0).astype(np.float32),
        prompt_len=prompt_len,
        format_ok=True,
        num_turns=1,
        finish_reason="stop",
        attempt=attempt,
        **fields,
    )


def _sub_trajectory(run_id: str, query: str, k: int, attempt: str, call: str, tokens: list[int]) -> Trajectory:
    return _trajectory(
        run_id,
        "sub",
        query,
        k,
        attempt,
        tokens,
        call_id=call,
        task=f"find what {query} asks",
        findings=f"found: the answer to {query}",
        result_ok=True,
    )


def _stats(run_id: str, query: str, k: int, attempt: str, calls: list[str], **fields) -> RewardStats:  # noqa: ANN003
    values = {"reward_main": 1.0, "r_format": 1.0, "r_correct": 1.0, "num_sub_calls": len(calls), **fields}
    return RewardStats(
        run_id=run_id, step=0, query_id=query, rollout_index=k, sub_call_ids=calls, attempt=attempt, **values
    )


def _plan(run_id: str, queries: list[str], k: int) -> StepPlan:
    return StepPlan(
        run_id=run_id,
        step=0,
        query_ids=queries,
        num_rollouts=k,
        main_version=0,
        sub_versions={"sub": 0},
        started_at=time.time(),
    )


def _publish_stats(bus, stats: RewardStats, msg_id: str | None = None) -> None:  # noqa: ANN001
    # the main agent's de-duplication id (actors/main_agent.py); a forged copy needs its own or it is not stored
    msg_id = msg_id or f"stats-{stats.step}-{stats.query_id}-{stats.rollout_index}-{stats.attempt}"
    bus.js_publish(bus.subjects.reward_stats, stats, msg_id=msg_id)


def _wait_received(deliveries, node: str, kind: str, count: int, nodes: NodeProcesses) -> None:  # noqa: ANN001
    """Until node `node` has received `count` messages of type `kind` (its delivery audit), and a moment more for
    its aligner actor to take them: what the test publishes next reaches the actor after them."""
    deadline = time.monotonic() + 30
    while sum(1 for r in received(deliveries, node) if r["type"] == kind) < count:
        assert time.monotonic() < deadline, f"{node} did not receive {count} {kind}: {nodes.output(node)[-2000:]}"
        time.sleep(0.05)
    time.sleep(0.5)


def _wait_refused(events: EventLog, side: str, count: int, nodes: NodeProcesses, node: str) -> list[Event]:
    deadline = time.monotonic() + 30
    while len(events.kinds(f"{side}.refused")) < count:
        assert time.monotonic() < deadline, (
            f"{count} {side}.refused events expected, got {[e.message for e in events.kinds(f'{side}.refused')]}: "
            f"{nodes.output(node)[-2000:]}"
        )
        time.sleep(0.05)
    return events.kinds(f"{side}.refused")


def _samples(batch: AlignedBatch) -> dict[str, list[int]]:
    """Each sample's id and its tokens."""
    ends = np.cumsum(batch.lengths)
    starts = ends - batch.lengths
    return {sid: batch.token_ids[s:e].tolist() for sid, s, e in zip(batch.sample_ids, starts, ends, strict=True)}


def _finish(bus, nodes: NodeProcesses, name: str) -> int | None:  # noqa: ANN001
    """The controller's run.finished: the node (--until-finished) stops by itself; its exit code (None: it did
    not stop within 45 s)."""
    bus.publish(bus.subjects.events, Event(kind="run.finished", message="test over"))
    try:
        return nodes.procs[name].wait(timeout=45)
    except subprocess.TimeoutExpired:
        return None


def _letters(bus) -> list[DeadLetter]:  # noqa: ANN001
    return [m for m in read_stream(bus, bus.subjects.stream("dlq")) if isinstance(m, DeadLetter)]


def test_the_sub_aligner_refuses_forged_stats_and_trajectories_and_aligns_the_real_ones(
    nats_server, tmp_path, make_bus, run_id
):
    bus = make_bus("test")
    events = EventLog(bus)
    config = pipeline_config(
        tmp_path, run_id, pipeline={"queries_per_step": 2, "rollouts_per_query": 2}, algo={"alignment": {"d": 1}}
    )
    loaded = load_config(NodeConfig, config)
    q0, q1 = [q.id for q in load_task_questions(loaded.pipeline, loaded.tools).splits["train"][:2]]
    deliveries = tmp_path / "deliveries"
    name = "sub-aligner"
    attempts = {q0: _attempt(), q1: _attempt()}
    calls = {(q, k): f"{attempts[q]}.r{k}.t1" for q in (q0, q1) for k in range(2)}
    tokens = {key: _tokens(4 * i) for i, key in enumerate(calls)}
    nodes = NodeProcesses(nats_server.url, config, tmp_path / "logs")
    try:
        nodes.start(name, "sub-aligner", extra=("--until-finished",))
        events.wait_for("node.started", timeout_s=90, describe=lambda: nodes.output(name)[-2000:])

        # Before the plan: stats for a query the plan will not have (held until the plan comes, then refused).
        outside = _stats(run_id, "not-a-query", 0, _attempt(), [f"{_attempt()}.r0.t1"])
        _publish_stats(bus, outside)
        _wait_received(deliveries, name, "RewardStats", 1, nodes)
        bus.js_publish(bus.subjects.step_start, _plan(run_id, [q0, q1], 2), msg_id="plan-0")
        _wait_refused(events, "sub", 1, nodes, name)

        # Stats that count two calls and name one (refused as they arrive, before the real ones of that rollout).
        miscounted = _stats(run_id, q1, 0, attempts[q1], [calls[(q1, 0)]], num_sub_calls=2)
        _publish_stats(bus, miscounted, msg_id="forged-miscounted")
        # A trajectory under the real call id of rollout (q0, 0), of its attempt, but claiming query q1: nothing
        # names the call yet, so it is kept, and refused when the stats that name the call arrive.
        wrong_query = _sub_trajectory(run_id, q1, 0, attempts[q0], calls[(q0, 0)], FORGED_TOKENS)
        bus.js_publish(bus.subjects.trajectories("sub"), wrong_query)
        # The real call id of rollout (q0, 1) on a trajectory of another attempt.
        other_attempt = _sub_trajectory(run_id, q0, 1, _attempt(), calls[(q0, 1)], FORGED_TOKENS)
        bus.js_publish(bus.subjects.trajectories("sub"), other_attempt)
        _wait_received(deliveries, name, "Trajectory", 2, nodes)
        _wait_refused(events, "sub", 3, nodes, name)
        assert not [e for e in events.kinds("sub.refused") if "claims query" in e.message]  # kept, so far

        # The real pieces: first the stats of (q0, 0), which refuse the kept forged trajectory of its call; only
        # then that call's real trajectory (keep_first counts a copy of the kept one's attempt as a duplicate).
        _publish_stats(bus, _stats(run_id, q0, 0, attempts[q0], [calls[(q0, 0)]]))
        _wait_refused(events, "sub", 4, nodes, name)
        for (q, k), call in calls.items():
            bus.js_publish(
                bus.subjects.trajectories("sub"), _sub_trajectory(run_id, q, k, attempts[q], call, tokens[(q, k)])
            )
        for (q, k), call in calls.items():
            if (q, k) != (q0, 0):
                _publish_stats(bus, _stats(run_id, q, k, attempts[q], [call], r_correct=float(k)))

        batch_event = events.wait_for("sub.batch", timeout_s=60, describe=lambda: nodes.output(name)[-3000:])
        chunks = side_batches(bus, "sub")
        refused = [e.message for e in events.kinds("sub.refused")]
        finished = _finish(bus, nodes, name)
    finally:
        codes = nodes.stop_all()
    assert finished == 0 and codes == {name: 0}, nodes.output(name)[-3000:]

    assert len(chunks) == 1 and chunks[0].step == 0, chunks
    samples = _samples(chunks[0])
    assert len(samples) == 2 * 2 * 1  # B·K·D
    assert sorted(samples) == sorted(f"{q}/{attempts[q]}/r{k}/{calls[(q, k)]}#0" for q, k in calls)
    for (q, k), call in calls.items():  # the real trajectory of every call, (q0, 0)'s too; nothing forged
        assert samples[f"{q}/{attempts[q]}/r{k}/{call}#0"] == tokens[(q, k)]
    assert FORGED_TOKENS not in samples.values()
    assert batch_event.data["refused"] == 4.0, batch_event.data
    assert batch_event.data.get("redelivered", 0.0) == 0.0 and batch_event.data.get("superseded", 0.0) == 0.0
    assert batch_event.data["lost"] == 0.0 and batch_event.data["timed_out"] == 0.0, batch_event.data
    assert batch_event.data["samples"] == 4.0 and batch_event.data["placeholders"] == 0.0, batch_event.data

    letters = _letters(bus)
    assert [letter.error_type for letter in letters] == ["PieceCheck"] * 4, letters
    expected = [
        (outside, "RewardStats of step 0 refused: query 'not-a-query' is not one of step 0's plan"),
        (miscounted, "RewardStats of step 0 refused: 2 sub calls counted but 1 named"),
        (other_attempt, f"Trajectory of step 0 refused: call id {calls[(q0, 1)]!r} is of attempt {attempts[q0]!r}"),
        (wrong_query, f"Trajectory of step 0 refused: call {calls[(q0, 0)]!r} claims query {q1!r}"),
    ]
    by_reason = sorted(letters, key=lambda letter: letter.reason)
    for forged, reason in expected:
        matching = [letter for letter in by_reason if letter.reason.startswith(reason)]
        assert len(matching) == 1, (reason, [letter.reason for letter in letters])
        piece = decode(matching[0].payload)
        assert type(piece) is type(forged) and piece.query_id == forged.query_id, piece  # the forged piece itself
        assert matching[0].subject.endswith(".stats" if isinstance(forged, RewardStats) else ".traj.sub")
    assert sorted(refused) == sorted(letter.reason for letter in letters)  # each said in a sub.refused event


def test_the_main_aligner_refuses_forged_trajectories_and_aligns_the_real_ones(nats_server, tmp_path, make_bus, run_id):
    bus = make_bus("test")
    events = EventLog(bus)
    config = pipeline_config(tmp_path, run_id, pipeline={"queries_per_step": 1, "rollouts_per_query": 2})
    loaded = load_config(NodeConfig, config)
    q0 = load_task_questions(loaded.pipeline, loaded.tools).splits["train"][0].id
    name = "main-aligner"
    attempt = _attempt()
    nodes = NodeProcesses(nats_server.url, config, tmp_path / "logs")

    def main(k: int, tokens: list[int], **fields) -> Trajectory:  # noqa: ANN003
        return _trajectory(run_id, "main", q0, k, attempt, tokens, answer="an answer", r_format=1.0, **fields)

    try:
        nodes.start(name, "main-aligner", extra=("--until-finished",))
        events.wait_for("node.started", timeout_s=90, describe=lambda: nodes.output(name)[-2000:])
        bus.js_publish(bus.subjects.step_start, _plan(run_id, [q0], 2), msg_id="plan-0")
        forged = [
            main(0, FORGED_TOKENS, r_correct=5.0),
            main(1, FORGED_TOKENS, r_correct=1.0, call_id=f"{attempt}.r1.t1"),
            main(7, FORGED_TOKENS, r_correct=1.0),
        ]
        for trajectory in forged:
            bus.js_publish(bus.subjects.trajectories("main"), trajectory)
        real = [main(0, _tokens(0), r_correct=1.0), main(1, _tokens(4), r_correct=0.0)]
        for trajectory in real:
            bus.js_publish(bus.subjects.trajectories("main"), trajectory)
        batch_event = events.wait_for("main.batch", timeout_s=60, describe=lambda: nodes.output(name)[-3000:])
        _wait_refused(events, "main", 3, nodes, name)
        chunks = side_batches(bus, "main")
        refused = [e.message for e in events.kinds("main.refused")]
        finished = _finish(bus, nodes, name)
    finally:
        codes = nodes.stop_all()
    assert finished == 0 and codes == {name: 0}, nodes.output(name)[-3000:]

    assert len(chunks) == 1 and chunks[0].step == 0, chunks
    samples = _samples(chunks[0])
    assert samples == {f"{q0}/{attempt}/r0": _tokens(0), f"{q0}/{attempt}/r1": _tokens(4)}  # B·K, both real
    assert chunks[0].rewards.tolist()[0] > chunks[0].rewards.tolist()[1]  # r_correct 1 over 0, not the forged 5
    assert batch_event.data["refused"] == 3.0 and batch_event.data["samples"] == 2.0, batch_event.data
    assert batch_event.data["failed"] == 0.0 and batch_event.data["missing"] == 0.0, batch_event.data

    letters = _letters(bus)
    assert [letter.error_type for letter in letters] == ["PieceCheck"] * 3, letters
    reasons = sorted(letter.reason for letter in letters)
    assert reasons == sorted(
        [
            "Trajectory of step 0 refused: r_correct 5 outside [0, 1]",
            f"Trajectory of step 0 refused: a main trajectory with call id '{attempt}.r1.t1'",
            "Trajectory of step 0 refused: rollout 7 where step 0's plan has K = 2",
        ]
    ), reasons
    for letter in letters:
        assert decode(letter.payload).token_ids.tolist() == FORGED_TOKENS
    assert sorted(refused) == reasons
