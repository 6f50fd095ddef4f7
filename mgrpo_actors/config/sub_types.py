"""What a config's sub-agent types (agents.subs, learners.subs) must satisfy together with the rest of the config
(the checks of one type's own section are AgentConfig's and LearnerConfig's)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["TYPE_STREAM", "check_sub_types"]

# A named sub-agent type's streams (Subjects.streams): traj-<type>, stats-<type>, batch-<type>.
TYPE_STREAM = re.compile(r"^(traj|stats|batch)-([a-z][a-z0-9_]{0,31})$")


def check_sub_types(config: Any) -> None:
    """Of a NodeConfig (config/node.py calls this as it is built, so it is not imported here): learners.subs names
    only types of agents.subs; stream caps name the run's streams; a type's tools are tools the tool nodes serve; a
    type that does not read the web says what it does; the single agent has no sub-agent types."""
    unknown = [name for name in config.learners.subs if name not in config.agents.subs]
    if unknown:
        raise ValueError(
            f"learners.subs names {unknown}, not sub-agent types of agents.subs "
            f"({', '.join(config.agents.subs) or 'none: the one type is agents.sub, its learner learners.sub'})"
        )
    for name in config.nats.stream_max_msgs:
        named = TYPE_STREAM.match(name)
        if named and named.group(2) not in ("main", "sub", *config.agents.subs):
            raise ValueError(f"nats.stream_max_msgs names {name!r}, a stream of no sub-agent type of agents.subs")
    if config.agents.subs and config.run.method == "single-agent":
        raise ValueError("run.method is single-agent: it has no sub-agents, so agents.subs must stay empty")
    for sub_type in config.agents.subs:
        tools = config.sub_tools(sub_type)
        missing = [name for name in tools if name not in config.tools.serve]
        if missing:
            raise ValueError(
                f"agents.subs.{sub_type}.tools names {missing}, which the tool nodes do not serve "
                f"(tools.serve: {', '.join(config.tools.serve)}): add them there (others under tools.extra)"
            )
        if set(tools) != {"search", "visit"} and config.agent(sub_type).description is None:
            raise ValueError(
                f"agents.subs.{sub_type}.description is null, but its tools are {list(tools)}: say what it does "
                "(M's delegate tool describes a sub-agent without one as searching and reading web pages)"
            )
