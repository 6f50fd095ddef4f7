"""A rule policy for the pipeline's multi-process tests, plugged in as a custom engine
(`agents.main.engine: tests.pipeline_policy:rule_engine`, same for the sub-agent).

Tiny random models almost never write a valid tool call, so a pipeline run with them has no
delegations and no tool traffic to test. This policy reads the real conversation (decoded from the
real prompt ids) and writes real turns with the real tokenizer (tests/scripted_engine.py's
ScriptedEngine), varied by position in the batch so rewards differ within a group:
- M delegates the question (twice for some questions, so d_k varies), then answers with what came
  back; every other rollout of a group first writes a malformed turn (format invalid, R_M = 0).
- S searches its task, visits the first result, then answers with the page's first line as findings
  and the url as evidence; every other subtask of a batch first writes a malformed turn (R_S = 0).
- With several sub-agent types (M's prompt lists `delegate_<type>` tools), M delegates to each type once, in
  order; a sub-agent with the calculator tool (and no search) computes a sum and answers with its result.
`MGRPO_TEST_POLICY_DELAY_S` (env) makes every generate call that slow, so a test can kill a process
while its calls are in flight.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Sequence

from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.engines.base import EngineConfig, Generation, SamplingParams
from tests.scripted_engine import ScriptedEngine, assistant_turns

__all__ = ["rule_engine", "main_turn", "sub_turn"]

_URL = re.compile(r"synth://wiki/[a-z0-9-]+")
_DELEGATE_TOOLS = re.compile(r'"name": "(delegate_[a-z0-9_]+)"')
_MAIN = ("`delegate`", "`delegate_<name>`")  # what only M's role text says


def _last_tool_message(prompt: str) -> str:
    tail = prompt[prompt.rindex("<|im_start|>user") :]
    parts = tail.split("<|im_start|>tool\n")
    return parts[-1].split("<|im_end|>")[0] if len(parts) > 1 else ""


def _user_message(prompt: str) -> str:
    return prompt[prompt.rindex("<|im_start|>user\n") + len("<|im_start|>user\n") :].split("<|im_end|>")[0]


def main_turn(prompt: str, index: int) -> str:
    """M's next turn for the rollout at `index` of its generate batch."""
    question = _user_message(prompt)
    turn = assistant_turns(prompt)
    typed = list(dict.fromkeys(_DELEGATE_TOOLS.findall(prompt)))  # the tools listed, then any calls: each once
    # one call to each sub-agent type, or, with one type, one or two calls (so d_k varies)
    delegations = len(typed) or 1 + int(hashlib.sha256(question.encode()).hexdigest(), 16) % 2
    if index % 2 == 1 and turn == 0:
        return "I am not sure what to do."  # malformed: this rollout's format is invalid
    done = turn - (index % 2)
    if done < delegations:
        tool = typed[done % len(typed)] if typed else "delegate"
        return format_tool_call(tool, {"task": question, "context": ""})
    result = _last_tool_message(prompt)
    try:
        findings = json.loads(result)["findings"]
    except (ValueError, KeyError, TypeError):
        findings = "unknown"
    return format_answer(findings.split(".")[0] or "unknown")


def sub_turn(prompt: str, index: int) -> str:
    """S's next turn: search, visit the first hit, answer with the page's first line."""
    task = _user_message(prompt).removeprefix("Task: ").split("\n")[0]
    turn = assistant_turns(prompt) - (index % 2)
    result = _last_tool_message(prompt)
    if turn < 0:
        return "Let me think about where to look."  # malformed: this sub-trajectory's format is invalid
    if '"name": "calculator"' in prompt and '"name": "search"' not in prompt:  # a calculator sub-agent type
        if turn == 0:
            return format_tool_call("calculator", {"expression": f"{len(task)} + {index}"})
        return format_answer(json.dumps({"findings": result.strip()[:200] or "nothing computed", "evidence": []}))
    if turn == 0:
        return format_tool_call("search", {"query": task[:80]})
    urls = _URL.findall(result)
    if turn == 1 and urls:
        return format_tool_call("visit", {"url": urls[0], "goal": task[:80]})
    body = result.split("\n\n", 1)[-1].strip().split("\n")[0]
    return format_answer(json.dumps({"findings": body[:200] or "nothing found", "evidence": urls[:1]}))


class RulePolicyEngine(ScriptedEngine):
    """ScriptedEngine whose turn depends on the prompt and its position in the generate batch."""

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        time.sleep(float(os.environ.get("MGRPO_TEST_POLICY_DELAY_S", "0")))
        generations = []
        for index, prompt in enumerate(prompts):
            text = self.tokenizer.decode(list(prompt))
            turn = main_turn if any(role in text for role in _MAIN) else sub_turn
            self.respond = lambda decoded, turn=turn, index=index: turn(decoded, index)
            generations.append(self._generation(prompt, params))
        return generations


def rule_engine(model, tokenizer, cfg: EngineConfig | None = None) -> RulePolicyEngine:  # noqa: ANN001
    """The engine factory `agents.*.engine` names (the model is loaded but not used)."""
    return RulePolicyEngine(tokenizer, respond=lambda text: "")
