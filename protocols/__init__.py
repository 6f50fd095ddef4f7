"""Wire contracts of mgrpo-actors: subject and stream names, message types, the msgpack codec.

Depends on nothing else of the project (docs/architecture.md §Layout); every process that talks on the bus
imports these and nothing more to understand what it reads.
"""

from protocols.codec import DEFAULT_MAX_BYTES, SCHEMA_VERSION, Envelope, decode, decode_envelope, encode
from protocols.errors import ProtocolError
from protocols.messages import (
    MESSAGE_TYPES,
    SAMPLE_KINDS,
    AlignedBatch,
    DeadLetter,
    Event,
    Failure,
    Message,
    Metric,
    NodeInfo,
    NodePing,
    QueryDone,
    RewardStats,
    RolloutRequest,
    StepAligned,
    StepDone,
    StepPlan,
    SubtaskRequest,
    SubtaskResult,
    ToolRequest,
    ToolResult,
    Trajectory,
    WeightsVersion,
)
from protocols.subjects import SIDES, Subjects, validate_run_id

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MESSAGE_TYPES",
    "SAMPLE_KINDS",
    "SCHEMA_VERSION",
    "SIDES",
    "AlignedBatch",
    "StepAligned",
    "DeadLetter",
    "Envelope",
    "Event",
    "Failure",
    "Message",
    "Metric",
    "NodeInfo",
    "NodePing",
    "ProtocolError",
    "QueryDone",
    "RewardStats",
    "RolloutRequest",
    "StepDone",
    "StepPlan",
    "Subjects",
    "SubtaskRequest",
    "SubtaskResult",
    "ToolRequest",
    "ToolResult",
    "Trajectory",
    "WeightsVersion",
    "decode",
    "decode_envelope",
    "encode",
    "validate_run_id",
]
