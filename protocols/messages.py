"""The message types of docs/architecture.md, as typed frozen dataclasses.

Every message that crosses the bus is one of these. Ids (run, step, query, rollout, call) travel in
the message; the schema version and the send time travel in the envelope (codec.py). Token ids,
logprobs and masks are numpy arrays sent as typed binary. Only `RewardStats` (scalars) and
`SubtaskRequest`/`SubtaskResult` (text) cross between the main and the sub side
(docs/architecture.md §Sides and what crosses them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from protocols.schema import FieldCheck, array_field, build_checks
from protocols.subjects import side_problem, sub_types_problem

__all__ = [
    "MESSAGE_TYPES",
    "SAMPLE_KINDS",
    "AlignedBatch",
    "StepAligned",
    "DeadLetter",
    "Event",
    "Failure",
    "Message",
    "Metric",
    "NodeInfo",
    "NodePing",
    "QueryDone",
    "RewardStats",
    "RolloutRequest",
    "StepDone",
    "StepPlan",
    "SubtaskRequest",
    "SubtaskResult",
    "ToolRequest",
    "ToolResult",
    "Trajectory",
    "WeightsVersion",
]

MESSAGE_TYPES: dict[str, type[Message]] = {}

# A side: "main" or a sub-agent type's name ("sub" for the one default type).
_SIDE = {"valid": side_problem}
_BY_SUB_TYPE = {"valid": sub_types_problem}
_FINITE = {"finite": True}
# Ids and names a reply echoes: bounded, so a request cannot make a node send megabytes back.
_NAME = {"max_len": 256}
# What fills a sample of an aligned batch (AlignedBatch.kinds).
SAMPLE_KINDS = ("original", "duplicate", "placeholder", "failed")


class Message:
    """Base of every wire message: registered by class name, validated field by field."""

    _checks: ClassVar[tuple[FieldCheck, ...]] = ()
    _field_names: ClassVar[frozenset[str]] = frozenset()
    _array_fields: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        MESSAGE_TYPES[cls.__name__] = cls

    def __post_init__(self) -> None:
        # Lists given for array fields become typed arrays, so a message built by hand encodes.
        for name, dtype in self._array_fields:
            value = getattr(self, name)
            if not isinstance(value, np.ndarray):
                object.__setattr__(self, name, np.asarray(value, dtype=dtype))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
                    return False
                if a.dtype != b.dtype or not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
                    return False
            elif a != b and not (a != a and b != b):  # NaN == NaN for round-trip comparisons
                return False
        return True

    __hash__ = None  # type: ignore[assignment]


def _message(cls: type) -> type:
    """Make `cls` a frozen dataclass and attach its field checks."""
    cls = dataclass(frozen=True, eq=False)(cls)
    cls._checks = build_checks(cls)
    cls._field_names = frozenset(c.name for c in cls._checks)
    cls._array_fields = tuple((f.name, f.metadata["dtype"]) for f in dataclasses.fields(cls) if "dtype" in f.metadata)
    return cls


@_message
class RolloutRequest(Message):
    """Controller -> main agents on `rollout.request` (stream `rollouts`, a work queue): roll out one query K
    times with the given policy versions."""

    run_id: str
    step: int
    query_id: str
    question: str
    answers: list[str]  # gold answer first, then aliases
    num_rollouts: int  # K
    main_version: int
    sub_versions: dict[str, int] = field(metadata=_BY_SUB_TYPE)  # each sub-agent type's policy version ({}: none)
    metadata: dict[str, Any] = field(default_factory=dict)


@_message
class StepPlan(Message):
    """Controller -> aligners on `step.start` (stream `steps`): step `step` rolls out these B queries K times
    each (their batches' shape)."""

    run_id: str
    step: int
    query_ids: list[str]
    num_rollouts: int  # K
    main_version: int
    sub_versions: dict[str, int] = field(metadata=_BY_SUB_TYPE)  # each sub-agent type's policy version ({}: none)
    started_at: float = 0.0  # unix time the controller started the step


@_message
class QueryDone(Message):
    """Main agent -> controller on `query.done`: the K rollouts of a query are scored and published (progress)."""

    run_id: str
    step: int
    query_id: str
    attempt: str
    num_rollouts: int
    failed_rollouts: int = 0
    sub_calls: int = 0
    seconds: float = 0.0
    node: str = ""
    correct_rollouts: int = 0  # rollouts whose answer was judged correct (r_correct 1): progress on this question
    reward_mean: float = 0.0  # mean R_M of its rollouts


@_message
class SubtaskRequest(Message):
    """Main agent -> sub-agents of one type on `subtask.request` (`subtask.request.<type>` for a type other than
    the default; request/reply): M's delegation `{task, context}` (docs/method.md §The system being trained)."""

    run_id: str
    step: int
    query_id: str
    rollout_index: int
    call_id: str
    task: str
    context: str
    sub_version: int  # the policy version of the type's sub-agent that is to answer


@_message
class SubtaskResult(Message):
    """Sub-agent -> main agent, the reply to a SubtaskRequest: the structured result M sees as a tool response
    (never S's transcript)."""

    call_id: str
    ok: bool
    findings: str
    evidence: list[str] = field(default_factory=list)  # urls S read its findings from
    error: str | None = None
    num_turns: int = 0
    # S ran an episode and published its trajectory on the sub side (False: S never ran, e.g. the task
    # did not fit its context); only calls with a trajectory count in d_k.
    has_trajectory: bool = True


@_message
class ToolRequest(Message):
    """Agent -> tool actors on `tool.<name>` (request/reply, a queue group per tool)."""

    call_id: str = field(metadata=_NAME)
    tool: str = field(metadata=_NAME)
    arguments: dict[str, Any]
    caller: str = field(default="", metadata=_NAME)


@_message
class ToolResult(Message):
    """Tool actor -> agent, the reply to a ToolRequest. A failed call is `ok=False` with `error`, never a lost
    rollout."""

    call_id: str
    ok: bool
    content: str
    error: str | None = None


@_message
class Trajectory(Message):
    """Agent -> its side's aligner on `traj.<side>` (stream `traj-<side>`): one agent's token-in/token-out
    trajectory; it stays on its own side (docs/architecture.md §Sides and what crosses them)."""

    run_id: str
    side: str = field(metadata=_SIDE)
    step: int
    query_id: str
    rollout_index: int
    call_id: str  # "" for a main trajectory, the subtask call id for a sub trajectory
    policy_version: int
    token_ids: np.ndarray = array_field("int32")
    loss_mask: np.ndarray = array_field("uint8")  # 1 on tokens the agent generated
    logprobs: np.ndarray = array_field("float32")  # behaviour logprobs, 0 where mask is 0
    prompt_len: int = 0
    format_ok: bool = True
    format_error: str | None = None
    num_turns: int = 0
    finish_reason: str = ""
    attempt: str = ""  # which attempt at the query produced it (a redelivered request is a new attempt)
    # The sampling that produced the tokens: the learner recomputes logprobs under the same distribution.
    temperature: float = field(default=1.0, metadata=_FINITE)
    top_p: float = field(default=1.0, metadata=_FINITE)
    top_k: int = 0
    failed: bool = False  # the rollout failed (engine or judge error): no tokens, reward 0, weight 0
    error: str | None = None
    # Main side only: M's answer and its scores (r_format, r_correct) from the main agent's judge.
    answer: str | None = None
    r_format: float = field(default=0.0, metadata=_FINITE)
    r_correct: float = field(default=0.0, metadata=_FINITE)
    # Sub side only: what M asked and what S returned (the sub aligner's r_expert judges these).
    task: str = ""
    context: str = ""
    findings: str = ""
    result_ok: bool = False


@_message
class RewardStats(Message):
    """Main agent -> sub aligner on `stats` (stream `stats`, in each side's account): the only numbers that
    cross sides, per (query, rollout)."""

    run_id: str
    step: int
    query_id: str
    rollout_index: int
    reward_main: float = field(metadata=_FINITE)  # R_M
    r_format: float = field(metadata=_FINITE)
    r_correct: float = field(metadata=_FINITE)
    num_sub_calls: int  # d_k: calls that ran S and published its trajectory
    sub_call_ids: list[str]
    attempt: str = ""  # the attempt whose sub trajectories sub_call_ids name
    failed: bool = False  # the rollout failed: its sub-trajectories (if any) are not used


@_message
class AlignedBatch(Message):
    """Aligner -> learner of one side on `batch.<side>` (stream `batch-<side>`): exactly B*K (main) or
    B*K*D (sub) samples, concatenated; a batch too big for one message travels as `num_chunks` chunks of
    whole samples, in sample order."""

    run_id: str
    side: str = field(metadata=_SIDE)
    step: int
    batch_id: str
    sample_ids: list[str]
    lengths: np.ndarray = array_field("int32")  # tokens per sample; token arrays are concatenated
    token_ids: np.ndarray = array_field("int32")
    loss_mask: np.ndarray = array_field("uint8")
    logprobs: np.ndarray = array_field("float32")
    advantages: np.ndarray = array_field("float32")  # one per sample
    weights: np.ndarray = array_field("float32")  # 0 for placeholders (docs/method.md §Trajectory alignment)
    policy_versions: np.ndarray = array_field("int32")
    rewards: np.ndarray = array_field("float32")  # R_M or R_S of each sample (0 for placeholders)
    kinds: np.ndarray = array_field("uint8")  # index into SAMPLE_KINDS
    # The advantage group of each sample: samples normalised together share it (-1: a placeholder, in no group).
    groups: np.ndarray = array_field("int32")
    temperatures: np.ndarray = array_field("float32")  # the sampling each sample was generated with
    top_ps: np.ndarray = array_field("float32")
    top_ks: np.ndarray = array_field("int32")
    d: int = 0  # D the sub batch was aligned to (0 on the main side)
    chunk: int = 0  # this message's place among the batch's chunks
    num_chunks: int = 1


@_message
class StepAligned(Message):
    """Aligner -> controller on `step.aligned.<side>` (stream `steps`): the step's batch is on the learner's
    stream."""

    run_id: str
    side: str = field(metadata=_SIDE)
    step: int
    batch_id: str
    num_samples: int
    stats: dict[str, float] = field(default_factory=dict)
    num_chunks: int = 1  # AlignedBatch messages that make the batch


@_message
class WeightsVersion(Message):
    """Learner -> rollout engines of its side on `weights.<side>` (and KV `versions-<side>`): a new policy
    version is available at `uri`, a full snapshot or a delta against version `base` (mgrpo_actors/weights/wire.py)."""

    run_id: str
    side: str = field(metadata=_SIDE)
    version: int
    step: int
    uri: str
    sha256: str = ""
    base: int | None = None  # a delta against this version (always the one before); None: a full snapshot


@_message
class StepDone(Message):
    """Learner -> controller on `step.done.<side>` (stream `steps`): the step's batch was applied."""

    run_id: str
    side: str = field(metadata=_SIDE)
    step: int
    batch_id: str
    version: int
    loss: float
    stats: dict[str, float] = field(default_factory=dict)
    duration_s: float = 0.0


@_message
class Metric(Message):
    """One metric sample, published on `mgrpo.<run>.metrics.<name>`."""

    name: str
    value: float
    step: int = 0
    node: str = ""
    role: str = ""
    tags: dict[str, str] = field(default_factory=dict)


@_message
class Event(Message):
    """Something a person watching the run wants to know about, on `events` (stream `metrics`)."""

    kind: str
    message: str
    level: str = field(default="info", metadata={"choices": ("debug", "info", "warning", "error")})
    node: str = ""
    role: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@_message
class DeadLetter(Message):
    """A message that could not be decoded or handled, with the reason, on `dlq.<subject>` (stream `dlq`;
    docs/architecture.md §Errors)."""

    subject: str
    reason: str
    error_type: str
    payload: bytes
    node: str = ""
    actor: str = ""
    failed_at: float = 0.0


@_message
class Failure(Message):
    """Reply to a request whose handling failed, so the requester learns why instead of timing out."""

    subject: str
    reason: str
    error_type: str


@_message
class NodePing(Message):
    """Ask every node of the run to report itself, on `node.ping` (request, many replies)."""

    requester: str = ""


@_message
class NodeInfo(Message):
    """A node's answer to NodePing."""

    node: str
    roles: list[str]
    versions: dict[str, str]
    uptime_s: float
    pid: int
    host: str
    dead_letters: int = 0
