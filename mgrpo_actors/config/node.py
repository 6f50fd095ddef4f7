"""The configuration of one `mgrpo-node` process: one tree for every role (and for `mgrpo rollout`).

Each section is a dataclass of its own with a docstring per field (the string right after it): run, nats, log,
tools and monitor here, agents, learners and pipeline in their own modules, algo in mgrpo_actors/algo/config.py.
Those docstrings are the one source of deploy/configs/default.yaml and docs/reference/config.md (`make config-docs`,
mgrpo_actors/config/reference.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from mgrpo_actors.algo.config import AlgoConfig
from mgrpo_actors.config.agents import AgentConfig, AgentsConfig
from mgrpo_actors.config.learner import LearnerConfig, LearnersConfig
from mgrpo_actors.config.nats_security import NatsAuthConfig, NatsTlsConfig, connect_security
from mgrpo_actors.config.paths import not_a_regular_file
from mgrpo_actors.config.pipeline import PipelineConfig
from mgrpo_actors.config.sub_types import TYPE_STREAM, check_sub_types
from mgrpo_actors.config.warmup import WebWarmupConfig
from mgrpo_actors.envs.questions import QuestionConfig, max_difference_share
from mgrpo_actors.envs.world import MIN_ENTITIES
from mgrpo_actors.runtime.jetstream import StreamLimits
from mgrpo_actors.runtime.security import ConnectSecurity
from protocols import DEFAULT_MAX_BYTES, DEFAULT_SUB_TYPE, MAIN_SIDE, Subjects, validate_run_id

# The run's streams by the names Subjects.stream takes (docs/architecture.md §Delivery and state), for the one default
# sub-agent type; a named type has traj-<type>, stats-<type> and batch-<type> instead of traj-sub, stats, batch-sub.
STREAM_NAMES = tuple(Subjects("r").stream_names())  # the run id is a stand-in: the names are its streams

__all__ = [
    "BUILTIN_TOOLS",
    "METHODS",
    "LogConfig",
    "MonitorConfig",
    "NatsConfig",
    "NodeConfig",
    "RunConfig",
    "ToolsConfig",
]

# What a run trains (docs/method.md §Training schedule): M-GRPO (both agents), the main-only baseline (S
# frozen), the single-agent baseline (one agent with every tool, plain GRPO; no sub side at all).
METHODS = ("m-grpo", "main-only", "single-agent")
Method = Literal["m-grpo", "main-only", "single-agent"]

# Tools a node serves by name (`tools.serve`); `tools.extra` adds more by import path.
BUILTIN_TOOLS = {
    "search": "mgrpo_actors.tools.search:SearchTool",
    "visit": "mgrpo_actors.tools.visit:VisitTool",
    "calculator": "mgrpo_actors.tools.calculator:CalculatorTool",
}


def check_range(key: str, value: float, low: float, high: float) -> None:
    """ValueError naming `key` unless low <= value <= high (NaN is never in range). Checked when the
    config loads, so a value that would crash or exhaust the host later is refused before connecting."""
    if not (low <= value <= high):  # written so that NaN fails too
        raise ValueError(f"{key} must be within [{low:g}, {high:g}], got {value!r}")


@dataclass(frozen=True)
class RunConfig:
    """Which run this node belongs to."""

    id: str = "default"
    """run id: scopes every subject (mgrpo.<id>.…), stream and bucket"""
    seed: int = 0
    """base seed of everything random in the run"""
    stop_timeout_s: float = 45.0
    """graceful stop: how long actors may take to finish their mailboxes (< systemd's 60 s)"""
    dir: str = "runs"
    """run directories go under here: <dir>/<id>/ holds checkpoints (and the embedded server's store)"""
    method: Method = "m-grpo"
    """m-grpo: M and S train; main-only: S frozen (baseline); single-agent: one agent (agents.main.tools: every tool by
    default), GRPO (baseline)"""
    compute_thread: bool = True
    """every heavy torch computation of a node's process (generation, weight loads, learner steps, the warm-up) on one
    thread, the actors waiting for it: PyTorch's OpenMP slows every thread down once several compute (measured on 2
    cores: rollouts 1.5-1.7x as long; mgrpo_actors/runtime/compute.py); false: each actor computes on its own thread
    (a GPU process whose roles should overlap)"""

    def __post_init__(self) -> None:
        validate_run_id(self.id)
        if self.method not in METHODS:
            raise ValueError(f"run.method must be one of {', '.join(METHODS)}, got {self.method!r}")
        check_range("run.stop_timeout_s", self.stop_timeout_s, 0.1, 3600)


@dataclass(frozen=True)
class NatsConfig:
    """How to reach NATS."""

    url: str = "nats://127.0.0.1:4222"
    """server URL; `--role all` without --nats starts an embedded server instead"""
    connect_timeout_s: float = 3.0
    """give up connecting after this long (clear error, non-zero exit)"""
    max_reconnect_attempts: int = 60
    """after a lost connection, retry this often (reconnect_wait_s apart)"""
    reconnect_wait_s: float = 1.0
    """pause between reconnect attempts"""
    ping_interval_s: float = 5.0
    """ping the server this often; 2 unanswered pings mark the connection stale and it reconnects (nats-py's default,
    120 s, left a deaf node deaf for ~6 min)"""
    request_timeout_s: float = 30.0
    """default timeout of request/reply calls"""
    max_message_bytes: int = DEFAULT_MAX_BYTES
    """codec size limit; the server's max_payload must be at least this"""
    duplicate_window_s: float = 3600.0
    """JetStream de-duplication window of the run's streams (restarts within it publish nothing twice)"""
    mailbox_limit: int = 256
    """deliveries of one subscription waiting in its actor's mailbox, at most; more wait in nats-py's queue
    (backpressure)"""
    pending_bytes_limit: int = 64 * 1024 * 1024
    """beyond mailbox_limit, nats-py queues up to this many bytes per subscription (at least max_message_bytes);
    beyond, it drops (counted: metric bus.slow_consumer_drops)"""
    stream_max_age_s: float = 7 * 86_400.0
    """the run's streams drop messages older than this"""
    stream_max_msgs: dict[str, int] = field(
        default_factory=lambda: {"metrics": 1_000_000, "dlq": 100_000, "steps": 100_000}
    )
    """Most messages a stream keeps, by stream (rollouts, traj-main, traj-sub, stats, batch-main, batch-sub, steps,
    metrics, dlq); absent or 0 = no count limit. Full, metrics, dlq and steps drop their oldest (steps: plans and
    step events, ~5 a step, which no reader is ever thousands of steps behind on); the others refuse new messages
    (publishers retry): work is never dropped unread (what was consumed goes: keep_consumed_steps). Counts, not
    bytes: JetStream reserves byte caps up front."""
    keep_consumed_steps: int = 10
    """steps of consumed work traj-main, traj-sub, stats, batch-main and batch-sub keep: what a stream's one reader
    acknowledged (trajectories whose batch is out, batches a checkpoint holds) is removed this many steps later,
    and the newest steps' stays for a look back with `mgrpo tap --stream`; 0 removes it after the next step, -1
    keeps everything (storage then grows with every step: a tiny run ~130 KB a step) ([ours]: 10)"""
    embedded_memory_limit_mib: int = 64
    """the embedded server's soft memory limit (GOMEMLIMIT; a GOMEMLIMIT in the environment wins), 0 = Go's
    default. Measured ([ours]: 64): over 1,000 tiny steps its RSS rose 79 -> 142 MiB without one and 55 -> 58 with
    48; SmolLM2's 270 MB weights in and out of its object store: 1.7 s without, 2.2 s with 64 (medians)"""
    replicas: int = 1
    """copies of each stream, KV and object store the node creates: 3 on a 3-server cluster"""
    auth: NatsAuthConfig = field(default_factory=NatsAuthConfig)
    """this node's NATS user (password from a file or variable, never on the command line; mgrpo deploy nats-config
    renders one per role)"""
    tls: NatsTlsConfig = field(default_factory=NatsTlsConfig)
    """TLS of the connection (CA, client certificate)"""

    def __post_init__(self) -> None:
        check_range("nats.connect_timeout_s", self.connect_timeout_s, 0.01, 600)
        check_range("nats.max_reconnect_attempts", self.max_reconnect_attempts, -1, 1_000_000)  # -1: for ever (nats-py)
        check_range("nats.reconnect_wait_s", self.reconnect_wait_s, 0.01, 600)
        check_range("nats.ping_interval_s", self.ping_interval_s, 0.1, 600)
        check_range("nats.request_timeout_s", self.request_timeout_s, 0.01, 86_400)
        check_range("nats.max_message_bytes", self.max_message_bytes, 1024, 1 << 30)
        check_range("nats.duplicate_window_s", self.duplicate_window_s, 1, 7 * 86_400)
        check_range("nats.stream_max_age_s", self.stream_max_age_s, 60, 10 * 365 * 86_400)
        check_range("nats.mailbox_limit", self.mailbox_limit, 1, 1_000_000)
        check_range("nats.replicas", self.replicas, 1, 5)  # JetStream's maximum
        check_range("nats.embedded_memory_limit_mib", self.embedded_memory_limit_mib, 0, 1 << 20)
        check_range("nats.keep_consumed_steps", self.keep_consumed_steps, -1, 10**9)
        # must hold one message
        check_range("nats.pending_bytes_limit", self.pending_bytes_limit, self.max_message_bytes, 1 << 34)
        # a named sub-agent type's streams (agents.subs) are checked against the run's types by NodeConfig
        unknown = sorted(
            name for name in self.stream_max_msgs if name not in STREAM_NAMES and not TYPE_STREAM.match(name)
        )
        if unknown:
            raise ValueError(
                f"nats.stream_max_msgs names unknown stream(s) {unknown}; the run's streams: {', '.join(STREAM_NAMES)} "
                "(and traj-<type>, stats-<type>, batch-<type> of each sub-agent type of agents.subs)"
            )
        for name, count in self.stream_max_msgs.items():
            check_range(f"nats.stream_max_msgs.{name}", count, 0, 10**12)

    def security(self, url: str | None = None) -> ConnectSecurity | None:
        """User, password (read now) and TLS for connecting to `url` (default: nats.url)."""
        return connect_security(url or self.url, self.auth, self.tls)

    @property
    def stream_limits(self) -> StreamLimits:
        """What the run's streams keep, for Bus.ensure_streams."""
        return StreamLimits(
            max_age_s=self.stream_max_age_s,
            duplicate_window_s=self.duplicate_window_s,
            max_msgs=dict(self.stream_max_msgs),
            replicas=self.replicas,
        )


@dataclass(frozen=True)
class LogConfig:
    """Logging of this node."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    """lowest level written"""
    json: bool | None = None
    """JSON lines; None = JSON unless stderr is a terminal"""
    deliveries_dir: str | None = None
    """audit: one JSON line per message this node receives, in <dir>/<node>.jsonl"""


@dataclass(frozen=True)
class ToolsConfig:
    """Tool actors started by `--role tool` (more processes with this role = more tool throughput)."""

    actors_per_tool: int = 2
    """actors per tool in this process; all of a tool's actors anywhere share one queue group"""
    serve: list[str] = field(default_factory=lambda: ["search", "visit"])
    """tools this node serves: built-in search, visit, calculator, or a name under tools.extra"""
    pages: str | None = None
    """pages.jsonl from `mgrpo world generate`; None = the built-in synthetic web below"""
    web_seed: int = 0
    """seed of the built-in synthetic web (must match the run's questions)"""
    web_entities: int = 1000
    """entities of the built-in synthetic web"""
    web_questions: int = QuestionConfig.num_questions
    """questions drawn from the built-in web, split 80/10/10 into train, validation and test (a small world may yield
    fewer); another count draws other questions"""
    web_difference_share: float = 0.0
    """share of the built-in web's questions that are difference questions (two lookups and a subtraction, for the
    calculator tool; at most 0.1, taken from the aggregates: 0.1 leaves none); above 0 the other questions' texts stay
    the same but their train/validation/test assignment changes"""
    visit_max_chars: int = 1500
    """visit returns at most this much of a page (small models have small contexts)"""
    search_results: int = 5
    """results search returns when the call names no k (agents may ask for up to 20)"""
    snippet_chars: int = 200
    """characters of each search result's snippet (the page's first line)"""
    extra: list[dict[str, Any]] = field(default_factory=list)
    """more tools: {name, factory: "pkg.mod:Class", args: {...}}"""

    def __post_init__(self) -> None:
        # Checked when the config loads (exit 2 naming the key), not after the node has connected.
        # threads in one process: more exhausts the host
        check_range("tools.actors_per_tool", self.actors_per_tool, 1, 256)
        if not self.serve:
            raise ValueError("tools.serve must name at least one tool")
        extra_names = [entry.get("name") for entry in self.extra]
        for entry in self.extra:
            if not isinstance(entry.get("name"), str) or not isinstance(entry.get("factory"), str):
                raise ValueError(
                    f"tools.extra entry {entry!r} needs a 'name' and a 'factory' (\"package.module:Class\")"
                )
        unknown = [name for name in self.serve if name not in BUILTIN_TOOLS and name not in extra_names]
        if unknown:
            raise ValueError(
                f"tools.serve names unknown tool(s) {unknown}; built-in: {list(BUILTIN_TOOLS)}; "
                "add others under tools.extra"
            )
        for name in self.serve:
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
                raise ValueError(
                    f"tool name {name!r} is invalid: use 1-64 characters from A-Z a-z 0-9 _ - (it is a subject token)"
                )
        problem = None if self.pages is None else not_a_regular_file(self.pages)
        if problem is not None:
            raise ValueError(f"tools.pages file {self.pages!r} {problem}")
        check_range("tools.visit_max_chars", self.visit_max_chars, 1, 1_000_000)
        check_range("tools.search_results", self.search_results, 1, 20)  # 20: search's most results per call
        check_range("tools.snippet_chars", self.snippet_chars, 8, 100_000)
        # generation is in memory, seconds per 1,000
        check_range("tools.web_entities", self.web_entities, MIN_ENTITIES, 100_000)
        check_range("tools.web_questions", self.web_questions, 10, 1_000_000)
        check_range("tools.web_difference_share", self.web_difference_share, 0.0, max_difference_share())


@dataclass(frozen=True)
class MonitorConfig:
    """What the monitor role exports besides its terminal view (mgrpo_actors/monitoring/exporters.py)."""

    prometheus_port: int = 0
    """serve the run's metrics for Prometheus at http://<addr>:<port>/metrics (0 = off); deploy/grafana/ has a
    dashboard"""
    prometheus_addr: str = "0.0.0.0"
    """address the Prometheus endpoint listens on"""
    tensorboard_dir: str = ""
    """write the run's metrics as TensorBoard event files here ("" = off)"""

    def __post_init__(self) -> None:
        check_range("monitor.prometheus_port", self.prometheus_port, 0, 65535)


@dataclass(frozen=True)
class NodeConfig:
    """Everything one node reads from its config file."""

    run: RunConfig = field(default_factory=RunConfig)
    """run identity"""
    nats: NatsConfig = field(default_factory=NatsConfig)
    """bus connection"""
    log: LogConfig = field(default_factory=LogConfig)
    """logging"""
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    """tool role and the built-in synthetic web"""
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    """main agent and sub-agent: models, budgets, judges"""
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    """controller, agents and aligners"""
    learners: LearnersConfig = field(default_factory=LearnersConfig)
    """one DeepSpeed learner per agent (mgrpo-node --role main-learner / sub-learner), weight sync"""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """the M-GRPO math (docs/method.md); every default cites its source: paper, reference code or [ours]"""
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    """the monitor role's Prometheus endpoint and TensorBoard files"""
    warmup: WebWarmupConfig = field(default_factory=WebWarmupConfig)
    """the optional supervised format warm-up (stage 0) `mgrpo run` does once, cached, before RL (off: steps 0)"""

    def __post_init__(self) -> None:
        if self.agents.main.tools is not None and self.run.method != "single-agent":
            raise ValueError(
                f"agents.main.tools chooses the single agent's tools, but run.method is {self.run.method} "
                "(M's tools are reason and delegate): leave it null or set run.method: single-agent"
            )
        for side in (MAIN_SIDE, *self.sub_types):
            reference = self.learner(side).reference
            # Only the KL term reads the reference: one set without it would be a setting that silently does nothing.
            if reference is not None and self.algo.objective.kl_coef == 0:
                raise ValueError(
                    f"learners.{side}.reference is {reference!r}, but algo.objective.kl_coef is 0 (no KL term, so no "
                    "reference is loaded): set kl_coef > 0 or leave the reference null"
                )
        check_sub_types(self)
        if self.algo.alignment.mode == "none" and self.pipeline.max_staleness < 1:
            # The ablation's queue carries sub samples into the next step, one policy version old: the learner's
            # staleness filter would drop every one of them.
            raise ValueError(
                "algo.alignment.mode: none trains S on samples carried over from the step before (one version old): "
                "pipeline.max_staleness must be >= 1, or the learner drops every carried sample"
            )

    @property
    def sub_types(self) -> tuple[str, ...]:
        """The sub-agent types the config describes, each its own side (protocols/subjects.py): those of agents.subs,
        or the one default type, "sub" (agents.sub, learners.sub)."""
        return tuple(self.agents.subs) or (DEFAULT_SUB_TYPE,)

    @property
    def warmup_trains_sub(self) -> bool:
        """Whether the warm-up (warmup/web.py) trains S beside M: every method but single-agent, whatever the
        sub-agent types are called (it warms up agents.sub)."""
        return self.run.method != "single-agent"

    @property
    def sides(self) -> tuple[str, ...]:
        """The agents this run has: M and every sub-agent type, or only "main" (the single agent) in single-agent
        mode."""
        return (MAIN_SIDE,) if self.run.method == "single-agent" else (MAIN_SIDE, *self.sub_types)

    def _section(self, section: AgentsConfig | LearnersConfig, side: str, what: str) -> Any:
        """`side`'s entry of agents or learners: main, the type's entry of subs (else sub, which it starts from), or
        sub for the one default type."""
        if side == MAIN_SIDE:
            return section.main
        if side in self.agents.subs:
            return section.subs.get(side, section.sub)
        if side == DEFAULT_SUB_TYPE and not self.agents.subs:
            return section.sub
        raise ValueError(f"no {what} {side!r}: the config has {', '.join((MAIN_SIDE, *self.sub_types))}")

    def agent(self, side: str) -> AgentConfig:
        """The agent config of `side`: agents.main, or the sub-agent type's (agents.subs.<type>, agents.sub for the
        default type)."""
        return self._section(self.agents, side, "agent")

    def learner(self, side: str) -> LearnerConfig:
        """The learner config of `side`: learners.main, or the sub-agent type's (learners.subs.<type>, else
        learners.sub)."""
        return self._section(self.learners, side, "learner")

    def sub_tools(self, sub_type: str) -> tuple[str, ...]:
        """The tools sub-agent type `sub_type` calls: its agents.subs.<type>.tools, else search and visit."""
        tools = self.agent(sub_type).tools
        return ("search", "visit") if tools is None else tuple(tools)

    def trains(self, side: str) -> bool:
        """Whether `side`'s agent trains: it exists, its learner is not frozen, and the method trains it
        (main-only keeps every sub-agent type frozen)."""
        if side not in self.sides or self.learner(side).frozen:
            return False
        return not (side != MAIN_SIDE and self.run.method == "main-only")
