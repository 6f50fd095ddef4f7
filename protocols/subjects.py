"""Every NATS subject, stream, KV bucket and consumer name of the project, scoped by run id.

All subjects live under `mgrpo.<run>.` so several runs share one NATS cluster and a tap on
`mgrpo.>` sees everything. Stream and bucket names cannot contain dots, so they are
`mgrpo-<run>-<what>`. The layout follows docs/architecture.md §"One training step" and §"Delivery and state".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SIDES", "Subjects", "validate_run_id"]

# The two sides of docs/architecture.md §"Sides and what crosses them".
SIDES = ("main", "sub")

_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def validate_run_id(run_id: str) -> str:
    """Return run_id if it can be one subject token and part of a stream name, else raise ValueError."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise ValueError(
            f"run id {run_id!r} is invalid: use 1-64 characters from A-Z a-z 0-9 _ - "
            "(it becomes a NATS subject token and part of stream names)"
        )
    return run_id


def _token(value: str, what: str) -> str:
    if not _TOKEN.fullmatch(value):
        raise ValueError(f"{what} {value!r} is invalid: use 1-64 characters from A-Z a-z 0-9 _ -")
    return value


def _side(side: str) -> str:
    if side not in SIDES:
        raise ValueError(f"side {side!r} is invalid: expected one of {', '.join(SIDES)}")
    return side


@dataclass(frozen=True)
class Subjects:
    """Names for one run. `Subjects("r1").tool("search")` == `"mgrpo.r1.tool.search"`."""

    run_id: str

    def __post_init__(self) -> None:
        validate_run_id(self.run_id)

    # ---- subjects -------------------------------------------------------------------------
    @property
    def root(self) -> str:
        """Prefix of every subject of the run."""
        return f"mgrpo.{self.run_id}"

    @property
    def all(self) -> str:
        """Wildcard matching every subject of the run (what `mgrpo tap` listens to by default)."""
        return f"{self.root}.>"

    @property
    def rollout_requests(self) -> str:
        """Controller -> main agents: one RolloutRequest per query (JetStream work queue)."""
        return f"{self.root}.rollout.request"

    @property
    def subtask_requests(self) -> str:
        """Main agent -> sub-agents: request/reply, queue group `sub-agents`."""
        return f"{self.root}.subtask.request"

    def tool(self, name: str) -> str:
        """Agents -> tool actors: request/reply on one subject per tool, queue group per tool."""
        return f"{self.root}.tool.{_token(name, 'tool name')}"

    def trajectories(self, side: str) -> str:
        """Agents -> aligner of their own side: full trajectories (JetStream)."""
        return f"{self.root}.traj.{_side(side)}"

    @property
    def reward_stats(self) -> str:
        """Main side -> sub side: the scalar RewardStats per (query, rollout) (JetStream)."""
        return f"{self.root}.stats"

    def batches(self, side: str) -> str:
        """Aligner -> learner of one side: AlignedBatch (JetStream)."""
        return f"{self.root}.batch.{_side(side)}"

    def weights(self, side: str) -> str:
        """Learner -> rollout engines of one side: WeightsVersion announcements."""
        return f"{self.root}.weights.{_side(side)}"

    @property
    def step_start(self) -> str:
        """Controller -> aligners: the StepPlan of a step (JetStream, stream `steps`)."""
        return f"{self.root}.step.start"

    def step_aligned(self, side: str) -> str:
        """Aligner -> controller: StepAligned once the step's batch is on the learner's stream."""
        return f"{self.root}.step.aligned.{_side(side)}"

    def step_done(self, side: str) -> str:
        """Learner -> controller: StepDone after a step is applied."""
        return f"{self.root}.step.done.{_side(side)}"

    @property
    def query_done(self) -> str:
        """Main agents -> controller: QueryDone when a query's K rollouts are published (progress)."""
        return f"{self.root}.query.done"

    def metrics(self, name: str = ">") -> str:
        """Metric samples, one subject per metric name (`>` for all of them)."""
        if name == ">":
            return f"{self.root}.metrics.>"
        for token in name.split("."):  # dotted names (e.g. "main.loss") are several tokens
            _token(token, "metric name part")
        return f"{self.root}.metrics.{name}"

    @property
    def events(self) -> str:
        """Human-readable events (started, step finished, errors)."""
        return f"{self.root}.events"

    @property
    def node_ping(self) -> str:
        """Every node answers a NodePing here with its NodeInfo (plain subscription, no queue)."""
        return f"{self.root}.node.ping"

    def dlq(self, subject: str = ">") -> str:
        """Dead letters of messages first sent on `subject` (the run prefix is dropped if present)."""
        if subject == ">":
            return f"{self.root}.dlq.>"
        prefix = f"{self.root}."
        tail = subject[len(prefix) :] if subject.startswith(prefix) else subject
        return f"{self.root}.dlq.{tail}"

    # ---- JetStream streams ----------------------------------------------------------------
    def stream(self, what: str) -> str:
        """Name of one of the run's streams (see `streams()`)."""
        return f"mgrpo-{self.run_id}-{_token(what, 'stream')}"

    def streams(self) -> dict[str, list[str]]:
        """Every stream of the run and the subjects it captures (docs/architecture.md §Delivery and state)."""
        return {
            self.stream("rollouts"): [self.rollout_requests],
            self.stream("traj-main"): [self.trajectories("main")],
            self.stream("traj-sub"): [self.trajectories("sub")],
            self.stream("stats"): [self.reward_stats],
            self.stream("batch-main"): [self.batches("main")],
            self.stream("batch-sub"): [self.batches("sub")],
            self.stream("steps"): [f"{self.root}.step.>"],
            self.stream("metrics"): [self.metrics(), self.events, self.query_done],
            self.stream("dlq"): [self.dlq()],
        }

    # ---- KV buckets -----------------------------------------------------------------------
    def bucket(self, what: str) -> str:
        """Name of one of the run's KV buckets or object stores: KV `state` (the controller's cursor),
        `state-<side>` (that side's aligner and learner), `versions-<side>` (that side's newest
        weights); object stores `weights-<side>`. Per side, so a side's users need nothing of the other's."""
        return f"mgrpo-{self.run_id}-{_token(what, 'bucket')}"
