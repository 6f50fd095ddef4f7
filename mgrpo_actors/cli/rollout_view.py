"""The work behind `mgrpo rollout` (see mgrpo_actors/cli/rollout.py): load models, run, print.

Kept apart from the command's parser so `mgrpo` starts without importing torch and transformers.
"""

from __future__ import annotations

import argparse
import textwrap
import time
from collections.abc import Callable
from typing import Any

import torch
from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text
from transformers.utils import logging as transformers_logging

from mgrpo_actors.agents.episode import ToolCall, TurnRecord
from mgrpo_actors.agents.setup import agent_tools, load_agent, rollout_config, synthetic_web
from mgrpo_actors.config import ConfigError, NodeConfig, load_node_config
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.envs.synthetic_web import SyntheticWeb
from mgrpo_actors.models.loader import ModelSpecError
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import DriverStats, ToolExecutor
from mgrpo_actors.rollout.local import Rollout, RolloutGroup, run_rollouts, run_single_agent_rollouts
from mgrpo_actors.rollout.local_subagents import SubCall
from mgrpo_actors.rollout.scoring import SubScore
from mgrpo_actors.tools.registry import ToolRegistry

__all__ = ["load_rollout_config", "print_group", "rollout_overrides", "run_rollout_command"]

_BUDGETS = {"turns": "turn", "context": "context"}  # EpisodeRecord.stop_reason -> the budget that ran out


def _question(web: SyntheticWeb, split: str, index: int, question_id: str | None) -> Question:
    questions = web.splits[split]
    if question_id is not None:
        found = [q for q in web.questions if q.id == question_id]
        if not found:
            raise SystemExit(f"mgrpo rollout: error: no question has id {question_id!r}")
        return found[0]
    if not 0 <= index < len(questions):
        raise SystemExit(f"mgrpo rollout: error: --question-index must be in [0, {len(questions)}), got {index}")
    return questions[index]


def rollout_overrides(args: argparse.Namespace) -> list[str]:
    """`--set` overrides, then the ones the shortcut flags stand for (so a flag wins)."""
    overrides = list(args.overrides)
    shortcuts = {"model": {"main": args.main, "sub": args.sub}}
    both = {
        "max_turns": args.max_turns,
        "max_new_tokens_per_turn": args.max_new_tokens,
        "max_context_tokens": args.max_context_tokens,
        "temperature": args.temperature,
    }
    for key, value in both.items():
        shortcuts[key] = {"main": value, "sub": value}
    for key, per_agent in shortcuts.items():
        overrides += [f"agents.{agent}.{key}={value}" for agent, value in per_agent.items() if value is not None]
    tools = {"web_seed": args.web_seed, "web_entities": args.entities}
    overrides += [f"tools.{key}={value}" for key, value in tools.items() if value is not None]
    if args.threads is not None:
        overrides.append(f"agents.torch_threads={args.threads}")
    return overrides


def load_rollout_config(args: argparse.Namespace) -> NodeConfig:
    """The node config with the command's overrides; a bad value exits with a message naming the key."""
    if args.k < 1:
        raise SystemExit(f"mgrpo rollout: error: need --k >= 1, got {args.k}")
    try:
        return load_node_config(args.config, rollout_overrides(args), "mgrpo rollout")
    except ConfigError as exc:
        raise SystemExit(f"mgrpo rollout: error: {exc}") from None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… [+{len(text) - limit} chars]"


def _wrapped(text: str, width: int, style: str = "", indent: int = 0) -> Text:
    """`text` wrapped to `width`, indented, without trailing spaces (Rich's own wrapping pads lines)."""
    lines = []
    for line in text.splitlines() or [""]:
        lines += textwrap.wrap(line, width=max(width - indent, 20), drop_whitespace=True, break_on_hyphens=False) or [
            ""
        ]
    return Text("\n".join(f"{' ' * indent}{line}".rstrip() for line in lines), style=style)


def _indented(text: str, width: int, style: str = "") -> Text:
    return _wrapped(text, width, style, indent=2)


def _turn(
    agent: str, number: int, turn: TurnRecord, width: int, result_chars: int, sub_call: Panel | None = None
) -> list[Any]:
    """A turn as sampled, then (for a delegation) the sub-agent's panel, then the tool message that came back."""
    header = Text(f"{agent} turn {number} · {turn.num_tokens} tokens · {turn.finish_reason}", style="bold")
    parts: list[Any] = [header, _indented(turn.text or "(empty)", width)]
    if sub_call is not None:
        parts.append(Padding(sub_call, (0, 0, 0, 2), expand=False))
    if turn.tool_result is not None:
        parts.append(_indented(f"← {_clip(turn.tool_result, result_chars)}", width, style="dim"))
    return parts


def _sub_panel(call: SubCall, score: SubScore, width: int, result_chars: int) -> Panel:
    """S's transcript in a box `width` wide."""
    inner = width - 4  # borders and the panel's own padding
    body: list[Any] = [_wrapped(f"task: {call.request.task}", inner)]
    if call.request.context:
        body.append(_wrapped(f"context: {call.request.context}", inner))
    for number, turn in enumerate(call.episode.turns, start=1):
        body.extend(_turn("S", number, turn, inner, result_chars))
    outcome = call.result.findings if call.result.ok else f"no result ({call.result.error})"
    body.append(_wrapped(f"result → M: {outcome}  evidence: {list(call.result.evidence)}", inner, style="bold"))
    title = f"sub-agent {call.request.call_id} · R_S {score.reward:.3f}"
    return Panel(Group(*body), title=title, title_align="left", width=width)


def _main_transcript(agent: str, rollout: Rollout, width: int, result_chars: int) -> list[Any]:
    """M's turns in order, each delegation followed by the sub-agent's panel, then M's answer."""
    calls = {
        call.request.call_id: (call, score) for call, score in zip(rollout.sub_calls, rollout.sub_scores, strict=True)
    }
    parts: list[Any] = []
    for number, turn in enumerate(rollout.main.turns, start=1):
        call_id = turn.action.call_id if isinstance(turn.action, ToolCall) else None
        panel = _sub_panel(*calls[call_id], width - 2, result_chars) if call_id in calls else None
        parts.extend(_turn(agent, number, turn, width, result_chars, panel))
    record = rollout.main
    answer = record.answer if record.answer is not None else f"none (the {_BUDGETS[record.stop_reason]} budget ran out)"
    parts.append(Text(f"{agent} answer: {answer}", style="bold"))
    return parts


def _reward_title(group: RolloutGroup, cfg: RolloutConfig) -> str:
    r = cfg.rewards
    title = f"rewards (docs/method.md §Rewards; α={r.alpha_format}, {r.alpha_correct}"
    if group.sub_weights is not None:
        w = group.sub_weights
        title += f"; β={w.beta_format}, {w.beta_correct}, {w.beta_expert}" + (" [β3 folded]" if w.expert_folded else "")
    return title + ")"


def _judges(group: RolloutGroup, cfg: RolloutConfig) -> str:
    """Which judge gave r_correct and, unless β3 was folded, r_expert."""
    judges = f"r_correct by {cfg.correct.name}"
    if group.sub_weights is not None and not group.sub_weights.expert_folded and cfg.expert is not None:
        judges += f", r_expert by {cfg.expert.name}"
    return judges


def _reward_table(group: RolloutGroup) -> Table:
    table = Table()
    for column in ("agent", "format", "r_format", "r_correct", "r_expert", "reward"):
        table.add_column(column, justify="left" if column in ("agent", "format") else "right")
    for rollout in group.rollouts:
        m = rollout.main_score
        table.add_row(
            f"M r{rollout.index}",
            _clip(m.format.reason or "ok", 60),
            f"{m.r_format:.0f}",
            f"{m.r_correct:.2g}",
            "",
            f"R_M {m.reward:.3f}",
        )
        for s in rollout.sub_scores:
            expert = "" if s.r_expert is None else f"{s.r_expert:.2g}"  # a judge may give partial credit
            table.add_row(
                f"S {s.call_id}",
                _clip(s.format.reason or "ok", 60),
                f"{s.r_format:.0f}",
                f"{s.main_correct:.2g} (M's)",
                expert,
                f"R_S {s.reward:.3f}",
            )
    return table


def _rate(stats: DriverStats) -> str:
    rate = stats.generated_tokens / stats.generate_s if stats.generate_s else 0.0
    return (
        f"{stats.turns} turns, {stats.generated_tokens} tokens, generate {stats.generate_s:.1f} s ({rate:.1f} tokens/s)"
    )


def print_group(console: Console, group: RolloutGroup, cfg: RolloutConfig, result_chars: int, single: bool) -> None:
    """Transcripts of every rollout, then the reward parts."""
    agent = "A" if single else "M"
    for rollout in group.rollouts:
        console.print(Rule(f"rollout {rollout.index}", style="bold"))
        for part in _main_transcript(agent, rollout, console.width, result_chars):
            console.print(part)
    console.print(_reward_title(group, cfg), style="bold")
    console.print(_judges(group, cfg))
    console.print(_reward_table(group))


def _run(
    args: argparse.Namespace,
    config: NodeConfig,
    console: Console,
    make_executor: Callable[[ToolRegistry], ToolExecutor] | None,
) -> int:
    started = time.perf_counter()
    web = synthetic_web(config.tools)
    question = _question(web, args.split, args.question_index, args.question_id)
    agents = config.agents
    try:
        main = load_agent(agents.main)
        sub = main if args.single_agent else load_agent(agents.sub)
    except ModelSpecError as exc:
        console.print(f"mgrpo rollout: error: {exc}")
        return 2
    tools = agent_tools(config.tools, main, agents.main.max_new_tokens_per_turn, pages=web.pages)
    ready = time.perf_counter()
    cfg = rollout_config(agents, config.algo)
    console.print(f"question {question.id} ({question.kind}, level {question.level}): {question.question}")
    console.print(f"gold answer: {' | '.join(question.answers)}")
    models = (
        f"single agent {agents.main.model}"
        if args.single_agent
        else f"M {agents.main.model}, S {agents.sub.model} (separate instances)"
    )
    console.print(f"{models} · policy version {main.engine.policy_version}")
    console.print(
        f"K={args.k} · seed {args.seed} · temperature {agents.main.temperature} · "
        f"{agents.main.max_turns} turns × {agents.main.max_new_tokens_per_turn} tokens per agent"
    )
    execute_tools = make_executor(tools) if make_executor else None
    if args.single_agent:
        group = run_single_agent_rollouts(
            question, args.k, main, tools, cfg, seed=args.seed, execute_tools=execute_tools
        )
    else:
        group = run_rollouts(question, args.k, main, sub, tools, cfg, seed=args.seed, execute_tools=execute_tools)
    print_group(console, group, cfg, args.result_chars, args.single_agent)
    console.print(
        f"timings: web and models {ready - started:.1f} s · rollouts {group.seconds:.1f} s · "
        f"total {time.perf_counter() - started:.1f} s"
    )
    first = "single agent" if args.single_agent else "main"
    console.print(f"  {first}: {_rate(group.main_stats)}; tools {group.main_stats.tools_s:.1f} s")
    if not args.single_agent:
        console.print(f"  sub: {_rate(group.sub_stats)}; tools {group.sub_stats.tools_s:.1f} s")
    return 0


def run_rollout_command(
    args: argparse.Namespace, make_executor: Callable[[ToolRegistry], ToolExecutor] | None = None
) -> int:
    """`mgrpo rollout`; the torch thread count is restored afterwards (the command may run in-process).

    `make_executor(tools)` may route tool calls elsewhere (`mgrpo run` sends them over NATS).
    """
    config = load_rollout_config(args)
    transformers_logging.disable_progress_bar()  # "Loading weights" bars would interleave with the transcript
    threads = torch.get_num_threads()
    torch.set_num_threads(config.agents.torch_threads)
    try:
        # soft_wrap: one-line texts are left to the terminal; Rich's own wrapping pads lines with spaces.
        return _run(args, config, Console(highlight=False, soft_wrap=True), make_executor)
    finally:
        torch.set_num_threads(threads)
