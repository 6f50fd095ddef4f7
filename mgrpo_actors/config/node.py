"""The configuration of one `mgrpo-node` process.

Sections for the pipeline, learners and algorithm are added by the issues that build them; each
section is a dataclass of its own with a one-line doc per field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from protocols import DEFAULT_MAX_BYTES, validate_run_id

__all__ = ["LogConfig", "NatsConfig", "NodeConfig", "RunConfig", "ToolsConfig"]


@dataclass(frozen=True)
class RunConfig:
    """Which run this node belongs to."""

    id: str = "default"  # run id: scopes every subject (mgrpo.<id>.…), stream and bucket
    seed: int = 0  # base seed of everything random in the run

    def __post_init__(self) -> None:
        validate_run_id(self.id)


@dataclass(frozen=True)
class NatsConfig:
    """How to reach NATS."""

    url: str = "nats://127.0.0.1:4222"  # server URL; `--role all` without --nats starts an embedded server instead
    connect_timeout_s: float = 3.0  # give up connecting after this long (clear error, non-zero exit)
    max_reconnect_attempts: int = 60  # after a lost connection, retry this often (reconnect_wait_s apart)
    reconnect_wait_s: float = 1.0  # pause between reconnect attempts
    request_timeout_s: float = 30.0  # default timeout of request/reply calls
    max_message_bytes: int = DEFAULT_MAX_BYTES  # codec size limit; the server's max_payload must be at least this

    def __post_init__(self) -> None:
        if self.connect_timeout_s <= 0 or self.request_timeout_s <= 0:
            raise ValueError("timeouts must be positive")


@dataclass(frozen=True)
class LogConfig:
    """Logging of this node."""

    level: Literal["debug", "info", "warning", "error"] = "info"  # lowest level written
    json: bool | None = None  # JSON lines; None = JSON unless stderr is a terminal


@dataclass(frozen=True)
class ToolsConfig:
    """Tool actors started by `--role tool` (more processes with this role = more tool throughput)."""

    actors_per_tool: int = 2  # actors per tool in this process; all of a tool's actors anywhere share one queue group
    serve: list[str] = field(default_factory=lambda: ["search", "visit"])  # tools this node serves
    pages: str | None = None  # pages.jsonl from `mgrpo world generate`; None = the built-in synthetic web below
    web_seed: int = 0  # seed of the built-in synthetic web (must match the run's questions)
    web_entities: int = 1000  # entities of the built-in synthetic web
    extra: list[dict[str, Any]] = field(default_factory=list)  # more tools: {name, factory: "pkg.mod:Class", args: {...}}

    def __post_init__(self) -> None:
        if self.actors_per_tool < 1:
            raise ValueError("tools.actors_per_tool must be at least 1")
        if not self.serve:
            raise ValueError("tools.serve must name at least one tool")


@dataclass(frozen=True)
class NodeConfig:
    """Everything one node reads from its config file."""

    run: RunConfig = field(default_factory=RunConfig)  # run identity
    nats: NatsConfig = field(default_factory=NatsConfig)  # bus connection
    log: LogConfig = field(default_factory=LogConfig)  # logging
    tools: ToolsConfig = field(default_factory=ToolsConfig)  # tool role
