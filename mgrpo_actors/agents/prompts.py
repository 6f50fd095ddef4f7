"""System prompts and demonstrations of the main agent, the sub-agent and the single agent.

Each system prompt is the role's job, the turn format (TURN_FORMAT_INSTRUCTIONS) and the role's tools as
JSON schemas (schemas_for_prompt). The sub-agent appears to M as its `delegate` tool; M never sees S's
prompt or transcript (docs/method.md §The system being trained).

A demonstration is one worked exchange (user, assistant turns, tool messages) placed between the system
prompt and the real question. Small instruction-tuned models (SmolLM2-135M) ignore a format described
only in words but copy one shown as earlier turns; its tokens are part of the prompt (loss mask 0).
"""

from __future__ import annotations

from collections.abc import Sequence

from mgrpo_actors.agents.delegation import DELEGATE_TOOL_NAME, ONE_TYPE, Delegates
from mgrpo_actors.agents.turn_format import TURN_FORMAT_INSTRUCTIONS, format_answer, format_tool_call
from mgrpo_actors.tools.registry import ToolRegistry, schemas_for_prompt

__all__ = [
    "MAIN_DEMONSTRATION",
    "MAIN_ROLE",
    "MAIN_ROLE_TYPES",
    "PLAIN_PROMPT",
    "SINGLE_DEMONSTRATION",
    "SINGLE_ROLE",
    "SUB_DEMONSTRATION",
    "SUB_ROLE",
    "SUB_ROLE_TOOLS",
    "main_demonstration",
    "main_system_prompt",
    "opening_messages",
    "single_system_prompt",
    "sub_system_prompt",
    "sub_user_message",
]

Messages = tuple[dict[str, str], ...]

MAIN_ROLE = (
    "You are the main agent of a research team and you answer the user's question. You cannot read the web "
    "yourself: give research subtasks to a sub-agent with the `delegate` tool (a self-contained task, plus "
    "the context it needs), and use `reason` to work with facts you already have. When you know the answer, "
    "give only the answer (a name, a year, a number) inside <answer>...</answer>."
)
# M's job with several sub-agent types: the same, with a delegate tool per sub-agent (agents.subs).
MAIN_ROLE_TYPES = (
    "You are the main agent of a team and you answer the user's question. You cannot read the web or run "
    "tools yourself: give subtasks to the team's sub-agents, one `delegate_<name>` tool each (a self-contained "
    "task, plus the context it needs), choosing the sub-agent whose description fits the subtask, and use "
    "`reason` to work with facts you already have. When you know the answer, give only the answer (a name, a "
    "year, a number) inside <answer>...</answer>."
)
SUB_ROLE = (
    "You are a research sub-agent. You get one task from the main agent. Use `search` to find pages and "
    "`visit` to read them. When you are done, answer with a JSON object inside <answer>...</answer>: "
    '{"findings": "what you found, in one or two sentences", "evidence": ["url of each page you used"]}.'
)
# A sub-agent type with tools of its own (agents.subs.<type>.tools other than search and visit).
SUB_ROLE_TOOLS = (
    "You are a sub-agent of a team. You get one task from the main agent. Use your tools, listed below. When "
    "you are done, answer with a JSON object inside <answer>...</answer>: "
    '{"findings": "what you found, in one or two sentences", "evidence": ["url of each page you used, if any"]}.'
)
SINGLE_ROLE = (
    "You are a research agent and you answer the user's question. Use `search` to find pages, `visit` to "
    "read them and `reason` to work with facts you already have. When you know the answer, give only the "
    "answer (a name, a year, a number) inside <answer>...</answer>."
)

# Plain GRPO (the single agent with no tools): how to answer, nothing about tools, no demonstration.
PLAIN_PROMPT = (
    "Answer the user's question. You may reason first inside <think>...</think>. Then give only the final "
    "answer inside <answer>...</answer>. Write nothing outside these blocks."
)

# One fictional fact, shown as the tools would return it (search.py and visit.py formats).
_URL = "synth://wiki/castellan-bridge"
_QUESTION = "When was Castellan Bridge built?"
_SEARCH_RESULT = (
    f"Results for 'Castellan Bridge':\n1. Castellan Bridge\n   {_URL}\n   Castellan Bridge is a bridge in Aldora."
)
_PAGE = (
    f"Title: Castellan Bridge\nURL: {_URL}\nGoal: the year it was built\n\n"
    "Castellan Bridge is a bridge in Aldora, built in 1871."
)
_FINDINGS = f'{{"findings": "Castellan Bridge was built in 1871.", "evidence": ["{_URL}"]}}'


def _user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def _assistant(content: str) -> dict[str, str]:
    return {"role": "assistant", "content": content}


def _tool(content: str) -> dict[str, str]:
    return {"role": "tool", "content": content}


_READ_THE_PAGE = (
    _assistant(format_tool_call("search", {"query": "Castellan Bridge"})),
    _tool(_SEARCH_RESULT),
    _assistant(format_tool_call("visit", {"url": _URL, "goal": "the year it was built"})),
    _tool(_PAGE),
)


def main_demonstration(delegate_tool: str = DELEGATE_TOOL_NAME) -> Messages:
    """M's worked example, delegating the lookup with `delegate_tool` (with several sub-agent types, the first
    type's: agents.subs lists the one that reads the web first)."""
    return (
        _user(_QUESTION),
        _assistant(format_tool_call(delegate_tool, {"task": _QUESTION, "context": ""})),
        _tool(_FINDINGS),
        _assistant(format_answer("1871")),
    )


MAIN_DEMONSTRATION: Messages = main_demonstration()
SUB_DEMONSTRATION: Messages = (_user(f"Task: {_QUESTION}"), *_READ_THE_PAGE, _assistant(format_answer(_FINDINGS)))
SINGLE_DEMONSTRATION: Messages = (_user(_QUESTION), *_READ_THE_PAGE, _assistant(format_answer("1871")))


def _system_prompt(role: str, tools: ToolRegistry) -> str:
    return f"{role}\n\n{TURN_FORMAT_INSTRUCTIONS}\n\n{schemas_for_prompt(tools)}"


def main_system_prompt(tools: ToolRegistry, delegates: Delegates = ONE_TYPE) -> str:
    """M's prompt: `tools` (its `reason`, if any) plus its delegate tools (`delegate`, or one per sub-agent type)."""
    with_delegate = tools.subset(tools.names)
    for tool in delegates.tools:
        with_delegate.register(tool)
    return _system_prompt(MAIN_ROLE if len(delegates.tools) == 1 else MAIN_ROLE_TYPES, with_delegate)


def sub_system_prompt(tools: ToolRegistry) -> str:
    """S's prompt: `tools` are its search and visit (SUB_ROLE), or a sub-agent type's own tools (SUB_ROLE_TOOLS)."""
    return _system_prompt(SUB_ROLE if set(tools.names) == {"search", "visit"} else SUB_ROLE_TOOLS, tools)


def single_system_prompt(tools: ToolRegistry) -> str:
    """The single agent's prompt (baseline): all tools."""
    return _system_prompt(SINGLE_ROLE, tools)


def sub_user_message(task: str, context: str) -> str:
    """What S reads from M's delegation."""
    return f"Task: {task}" if not context else f"Task: {task}\n\nContext: {context}"


def opening_messages(
    system_prompt: str, user: str, demonstration: Sequence[dict[str, str]] = ()
) -> list[dict[str, str]]:
    """The messages an episode starts from: system prompt, demonstration (if any), the real user message."""
    return [{"role": "system", "content": system_prompt}, *demonstration, _user(user)]
