"""A sub-agent type's prompt (issue 22, 1 + n; agents/prompts.py, agents/sub.py): a type with search and visit is
the research sub-agent it always was (SUB_ROLE and the worked example that reads a page); a type with tools of its
own gets SUB_ROLE_TOOLS, only its tools, and no example it could not follow."""

from __future__ import annotations

import pytest

from mgrpo_actors.agents.delegation import DelegationRequest
from mgrpo_actors.agents.episode import AgentEpisode
from mgrpo_actors.agents.prompts import SUB_DEMONSTRATION, SUB_ROLE, SUB_ROLE_TOOLS, sub_system_prompt
from mgrpo_actors.agents.sub import sub_episode, sub_tools
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.tools.calculator import CalculatorTool
from mgrpo_actors.tools.registry import ToolRegistry
from tests.agent_helpers import small_web, tiny_tokenizer, web_tools

REQUEST = DelegationRequest(task="What is 1990 - 1948?", context="", rollout_index=0, call_id="a1.r0.t1")
# The worked example's tool calls: a prompt with the example has each of them.
EXAMPLE_TURNS = [m["content"] for m in SUB_DEMONSTRATION if m["role"] == "assistant"]


def every_tool() -> ToolRegistry:
    """The web tools and reason of a node, and the calculator."""
    registry = web_tools(small_web())
    registry.register(CalculatorTool())
    return registry


def prompt_text(episode: AgentEpisode) -> str:
    return tiny_tokenizer().decode(episode.next_prompt_ids())


def tools_shown(prompt: str) -> str:
    return prompt.split("</tools>")[0]


def test_search_and_visit_keep_the_research_role():
    assert sub_system_prompt(sub_tools(every_tool())).startswith(SUB_ROLE + "\n\n")
    assert sub_system_prompt(every_tool().subset(["visit", "search"])).startswith(SUB_ROLE + "\n\n")


@pytest.mark.parametrize("names", [["calculator"], ["search"], ["search", "visit", "calculator"]])
def test_any_other_tools_get_the_role_that_names_no_tool(names):
    prompt = sub_system_prompt(every_tool().subset(names))
    assert prompt.startswith(SUB_ROLE_TOOLS + "\n\n") and SUB_ROLE not in prompt


def test_a_calculator_type_is_shown_and_allowed_only_the_calculator_without_the_example():
    episode = sub_episode(REQUEST, tiny_tokenizer(), every_tool(), AgentConfig(), tool_names=("calculator",))
    assert episode.tool_names == ("calculator",)
    prompt = prompt_text(episode)
    shown = tools_shown(prompt)
    assert '"name": "calculator"' in shown
    assert not [name for name in ("search", "visit", "reason") if f'"name": "{name}"' in shown]
    assert SUB_ROLE_TOOLS in prompt
    assert not [turn for turn in EXAMPLE_TURNS if turn in prompt] and "Castellan Bridge" not in prompt
    assert prompt.endswith("<|im_start|>user\nTask: What is 1990 - 1948?<|im_end|>\n<|im_start|>assistant\n")


def test_the_default_tools_open_with_the_example():
    episode = sub_episode(REQUEST, tiny_tokenizer(), every_tool(), AgentConfig())
    assert episode.tool_names == ("search", "visit")
    prompt = prompt_text(episode)
    assert SUB_ROLE in prompt and all(turn in prompt for turn in EXAMPLE_TURNS)


def test_a_type_naming_search_and_visit_is_the_default_sub_agent():
    named = sub_episode(REQUEST, tiny_tokenizer(), every_tool(), AgentConfig(), tool_names=("visit", "search"))
    default = sub_episode(REQUEST, tiny_tokenizer(), every_tool(), AgentConfig())
    assert set(named.tool_names) == {"search", "visit"}
    assert all(turn in prompt_text(named) for turn in EXAMPLE_TURNS)
    assert SUB_ROLE in prompt_text(named) and SUB_ROLE in prompt_text(default)


def test_a_system_prompt_override_still_replaces_a_types_role():
    cfg = AgentConfig(system_prompt="Compute.")
    prompt = prompt_text(sub_episode(REQUEST, tiny_tokenizer(), every_tool(), cfg, tool_names=("calculator",)))
    assert "Compute." in prompt and SUB_ROLE_TOOLS not in prompt
