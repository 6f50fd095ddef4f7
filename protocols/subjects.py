"""Every NATS subject, stream, KV bucket and consumer name of the project, scoped by run id.

All subjects live under `mgrpo.<run>.` so several runs share one NATS cluster and a tap on
`mgrpo.>` sees everything. Stream and bucket names cannot contain dots, so they are
`mgrpo-<run>-<what>`. The layout follows docs/architecture.md §"One training step" and §"Delivery and state".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_SUB_TYPE",
    "MAIN_SIDE",
    "RESERVED_SUB_TYPES",
    "SIDES",
    "Subjects",
    "side_problem",
    "sides_of",
    "sub_types_problem",
    "stats_stream",
    "validate_run_id",
    "validate_sub_type",
]

MAIN_SIDE = "main"
# The one sub-agent type of a run that names none: its side, roles, streams and buckets keep the names they had
# before runs could have several types (docs/architecture.md §"Sides and what crosses them").
DEFAULT_SUB_TYPE = "sub"
# The sides of a run with one sub-agent type.
SIDES = (MAIN_SIDE, DEFAULT_SUB_TYPE)

_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A sub-agent type's name is one token of subjects and a part of role ("<type>-agent"), durable, stream and bucket
# names ("traj-<type>"): no "-" or "." in it, so none of those names can be read two ways.
_SUB_TYPE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
# Names a sub-agent type may not take: the main side, and words that already name other things of a run.
RESERVED_SUB_TYPES = frozenset({MAIN_SIDE, "single", "all", "tool", "tools", "monitor", "controller"})


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


def validate_sub_type(name: str) -> str:
    """Return `name` if it can name a sub-agent type (and so a side), else raise ValueError."""
    if not isinstance(name, str) or not _SUB_TYPE.fullmatch(name):
        raise ValueError(
            f"sub-agent type {name!r} is invalid: use 1-32 characters from a-z 0-9 _, starting with a letter "
            "(it becomes a subject token and part of role, stream and bucket names)"
        )
    if name in RESERVED_SUB_TYPES:
        raise ValueError(f"sub-agent type {name!r} is reserved: choose another name")
    return name


def side_problem(name: object) -> str | None:
    """What is wrong with `name` as a side on the wire (None: nothing): the main side or a sub-agent type's name."""
    if name == MAIN_SIDE:
        return None
    try:
        validate_sub_type(name)  # type: ignore[arg-type]
    except ValueError as exc:
        return f"{name!r} is not a side: neither {MAIN_SIDE!r} nor a sub-agent type ({exc})"
    return None


def sub_types_problem(by_type: dict[str, object]) -> str | None:
    """What is wrong with the keys of a map by sub-agent type (None: nothing)."""
    bad = [name for name in by_type if name == MAIN_SIDE or side_problem(name) is not None]
    return f"{bad[0]!r} is not a sub-agent type" if bad else None


def sides_of(sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)) -> tuple[str, ...]:
    """The sides of a run whose sub-agent types are `sub_types` (a tuple of names): the main side, then one per
    type."""
    if not isinstance(sub_types, tuple):  # a bare string would be read as one type per letter
        raise ValueError(f"sub-agent types must be a tuple of names, got {sub_types!r}")
    if not sub_types:
        raise ValueError("a run has at least one sub-agent type")
    if len(set(sub_types)) != len(sub_types):
        raise ValueError(f"sub-agent types {list(sub_types)} name one type twice")
    return (MAIN_SIDE, *(validate_sub_type(name) for name in sub_types))


def stats_stream(sub_type: str = DEFAULT_SUB_TYPE) -> str:
    """Short name (Subjects.stream) of the stream of `sub_type`'s RewardStats: `stats` for the default type."""
    return "stats" if validate_sub_type(sub_type) == DEFAULT_SUB_TYPE else f"stats-{sub_type}"


@dataclass(frozen=True)
class Subjects:
    """Names for one run. `Subjects("r1").tool("search")` == `"mgrpo.r1.tool.search"`. A side's names are made only
    for the run's own sides: the main side and its sub-agent types (`sub_types`, by default the one type "sub")."""

    run_id: str
    sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)

    def __post_init__(self) -> None:
        validate_run_id(self.run_id)
        sides_of(self.sub_types)

    @property
    def sides(self) -> tuple[str, ...]:
        """The main side, then one side per sub-agent type."""
        return (MAIN_SIDE, *self.sub_types)

    def _side(self, side: str) -> str:
        if side not in self.sides:
            raise ValueError(f"side {side!r} is invalid: expected one of {', '.join(self.sides)}")
        return side

    def _sub(self, side: str) -> str:
        if self._side(side) == MAIN_SIDE:
            raise ValueError("the main side has no sub-agent subjects: expected a sub-agent type")
        return side

    # ---- subjects -------------------------------------------------------------------------
    @property
    def root(self) -> str:
        """Prefix of every subject of the run."""
        return f"mgrpo.{self.run_id}"

    def relative(self, subject: str) -> str:
        """`subject` of this run relative to its root (`mgrpo.<run>.stats.searcher` -> `stats.searcher`), as NATS
        permissions and account crossings are declared (mgrpo_actors/deploy/)."""
        prefix = f"{self.root}."
        if not subject.startswith(prefix):
            raise ValueError(f"subject {subject!r} is not one of run {self.run_id!r}")
        return subject.removeprefix(prefix)

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
        """Main agent -> sub-agents (the default type): request/reply, queue group `sub-agents`."""
        return self.subtask_requests_of(DEFAULT_SUB_TYPE)

    def subtask_requests_of(self, sub_type: str) -> str:
        """Main agent -> sub-agents of `sub_type`: request/reply, queue group `<type>-agents`. The default
        type keeps the subject it had alone (`subtask.request`); another gets a token of its own."""
        if self._sub(sub_type) == DEFAULT_SUB_TYPE:
            return f"{self.root}.subtask.request"
        return f"{self.root}.subtask.request.{sub_type}"

    def tool(self, name: str) -> str:
        """Agents -> tool actors: request/reply on one subject per tool, queue group per tool."""
        return f"{self.root}.tool.{_token(name, 'tool name')}"

    def trajectories(self, side: str) -> str:
        """Agents -> aligner of their own side: full trajectories (JetStream)."""
        return f"{self.root}.traj.{self._side(side)}"

    @property
    def reward_stats(self) -> str:
        """Main side -> sub side (the default type): the scalar RewardStats per (query, rollout) (JetStream)."""
        return self.reward_stats_of(DEFAULT_SUB_TYPE)

    def reward_stats_of(self, sub_type: str) -> str:
        """Main side -> the side of `sub_type`: its RewardStats. One subject (and stream) per type, since a
        stream's consumed messages are removed after its one reader acknowledged them (runtime/retention.py)."""
        if self._sub(sub_type) == DEFAULT_SUB_TYPE:
            return f"{self.root}.stats"
        return f"{self.root}.stats.{sub_type}"

    def batches(self, side: str) -> str:
        """Aligner -> learner of one side: AlignedBatch (JetStream)."""
        return f"{self.root}.batch.{self._side(side)}"

    def weights(self, side: str) -> str:
        """Learner -> rollout engines of one side: WeightsVersion announcements."""
        return f"{self.root}.weights.{self._side(side)}"

    @property
    def step_start(self) -> str:
        """Controller -> aligners: the StepPlan of a step (JetStream, stream `steps`)."""
        return f"{self.root}.step.start"

    def step_aligned(self, side: str) -> str:
        """Aligner -> controller: StepAligned once the step's batch is on the learner's stream."""
        return f"{self.root}.step.aligned.{self._side(side)}"

    def step_done(self, side: str) -> str:
        """Learner -> controller: StepDone after a step is applied."""
        return f"{self.root}.step.done.{self._side(side)}"

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

    def stream_names(self) -> list[str]:
        """Short names (`stream`'s `what`) of every stream of the run, in the order of `streams()`."""
        return [name.removeprefix(f"mgrpo-{self.run_id}-") for name in self.streams()]

    def streams(self) -> dict[str, list[str]]:
        """Every stream of the run and the subjects it captures (docs/architecture.md §Delivery and state); per
        side a trajectory and a batch stream, per sub-agent type a stream of its reward statistics."""
        streams = {self.stream("rollouts"): [self.rollout_requests]}
        streams |= {self.stream(f"traj-{side}"): [self.trajectories(side)] for side in self.sides}
        streams |= {self.stream(stats_stream(t)): [self.reward_stats_of(t)] for t in self.sub_types}
        streams |= {self.stream(f"batch-{side}"): [self.batches(side)] for side in self.sides}
        return streams | {
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
