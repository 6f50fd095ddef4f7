"""The colour rule: a task tiny models learn in about a dozen M-GRPO steps, so a CPU shows learning.

Every question asks for a colour and the gold answer is always "blue" (a rule on the answer token that
no model knows beforehand). Both tiny models (tiny:main as M, tiny:sub as S, unless others are named: M
and S may be of different families and tokenizers) are first warmed up on the turn format only
(mgrpo_actors/warmup/supervised.py, a short supervised fine-tune): M delegates the question to S, reads
S's result and answers a colour; S answers a colour. Their colours are drawn uniformly from COLOURS, so
the warmed-up M is right by chance (1/4): only RL can teach it the rule.
`mgrpo demo learn` runs it through the whole pipeline; tests/integration/test_it_learns.py checks it
learns, and that the same run with every advantage's sign flipped does not.

R_S carries M's correctness (β2; no expert judge here), so S's reward rises with M's.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from mgrpo_actors.agents.delegation import DelegateTool
from mgrpo_actors.agents.episode import BUDGET_NOTES
from mgrpo_actors.agents.prompts import main_system_prompt, opening_messages, sub_system_prompt, sub_user_message
from mgrpo_actors.agents.sub import SUB_TOOLS
from mgrpo_actors.agents.turn_format import format_answer, format_tool_call
from mgrpo_actors.config.node import ToolsConfig
from mgrpo_actors.models.cache import build_once, cache_root
from mgrpo_actors.models.loader import load_model, resolve_model_dir
from mgrpo_actors.tools.reason import ReasonTool
from mgrpo_actors.tools.registry import ToolRegistry
from mgrpo_actors.tools.setup import build_tool_registry
from mgrpo_actors.warmup.supervised import Demonstration, WarmupConfig, save_warmed, warm_up

__all__ = ["COLOURS", "TARGET", "demo_config", "warmed_models", "write_questions"]

COLOURS = ("red", "blue", "green", "yellow")
TARGET = "blue"
TASK = "Pick a colour."
NUM_QUESTIONS = 64
_RECIPE_VERSION = 1  # bump when the demonstrations or the warm-up change: part of the cache key


def write_questions(path: Path, count: int = NUM_QUESTIONS) -> Path:
    """`count` questions whose gold answer is TARGET, as a JSONL dataset."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(count):
            f.write(json.dumps({"id": f"colour-{i:03d}", "question": _question(i), "answer": TARGET}) + "\n")
    return path


def _question(i: int) -> str:
    return f"Which colour goes with item {i}?"


def _main_prompt() -> str:
    registry = ToolRegistry()
    registry.register(ReasonTool())  # M's own tool, as the main-agent actor registers it
    return main_system_prompt(registry)


def main_demonstrations(seed: int) -> list[Demonstration]:
    """M delegates TASK, reads S's colour, answers a colour of its own (uniform)."""
    draw = random.Random(seed)
    prompt = _main_prompt()
    demos = []
    for i in range(NUM_QUESTIONS):
        # With max_turns 2 the result comes with the turn-limit note, exactly as in a rollout.
        found = json.dumps({"findings": draw.choice(COLOURS), "evidence": []}) + "\n\n" + BUDGET_NOTES["turns"]
        turns = (
            format_tool_call(DelegateTool.name, {"task": TASK, "context": ""}),
            found,
            format_answer(draw.choice(COLOURS)),
        )
        demos.append(Demonstration(tuple(opening_messages(prompt, _question(i))), turns))
    return demos


def sub_demonstrations(seed: int, tools: ToolsConfig) -> list[Demonstration]:
    """S answers TASK with a colour (uniform)."""
    draw = random.Random(seed)
    opening = tuple(
        opening_messages(
            sub_system_prompt(build_tool_registry(tools, names=list(SUB_TOOLS))), sub_user_message(TASK, "")
        )
    )
    return [Demonstration(opening, (format_answer(draw.choice(COLOURS)),)) for _ in range(NUM_QUESTIONS)]


def warmed_models(
    tools: ToolsConfig, warmup: WarmupConfig | None = None, main: str = "tiny:main", sub: str = "tiny:sub"
) -> tuple[Path, Path]:
    """M's and S's models (specs `main`, `sub`: tiny:main and tiny:sub unless named, e.g. a tiny model of
    another family and tokenizer) warmed up on the format (their HF directories), built once and cached
    under a key of the recipe, the warm-up settings, the tool schemas S is shown and the base models
    (default warm-up: 100 steps)."""
    warmup = warmup or WarmupConfig(steps=100)
    dirs = []
    roles = (("main", main, lambda: main_demonstrations(seed=1)), ("sub", sub, lambda: sub_demonstrations(2, tools)))
    for role, spec, demos in roles:
        model_dir = resolve_model_dir(spec)
        # The tiny presets' directories name their recipe; any other model by its absolute path. The role: one
        # model may be warmed up as M and as S, on other demonstrations.
        model_key = model_dir.name if spec.startswith("tiny:") else str(model_dir.resolve())
        key = hashlib.sha256(
            repr(
                (
                    _RECIPE_VERSION,
                    warmup,
                    model_key,
                    sub_system_prompt(build_tool_registry(tools, names=list(SUB_TOOLS))),
                    *(() if (role, spec) in (("main", "tiny:main"), ("sub", "tiny:sub")) else (role,)),
                )
            ).encode()
        ).hexdigest()[:12]
        name = spec.removeprefix("tiny:") if spec.startswith("tiny:") else model_dir.resolve().name
        target = cache_root() / f"colour-rule-{role}-{name}-{key}"

        def build(directory: Path, spec: str = spec, demos: Any = demos) -> None:
            model, tokenizer = load_model(spec)
            warm_up(model, tokenizer, demos(), warmup)
            save_warmed(model, tokenizer, directory)

        dirs.append(build_once(target, build))
    return dirs[0], dirs[1]


def demo_config(main_dir: Path, sub_dir: Path, questions: Path, steps: int, advantage_sign: int = 1) -> dict[str, Any]:
    """The node config (as overrides) of the demo run: sized so the rule is learned in ~a dozen steps."""
    agent = {"temperature": 0.7, "demonstration": False}
    learner = {"lr": 1e-3, "micro_batch_samples": 16, "checkpoint_every": 0}  # tiny models from scratch take a high lr
    return {
        "agents": {
            "main": {**agent, "model": str(main_dir), "max_turns": 2, "max_new_tokens_per_turn": 48},
            "sub": {**agent, "model": str(sub_dir), "max_turns": 1, "max_new_tokens_per_turn": 32},
            "expert_judge": "none",
        },
        "algo": {"alignment": {"d": 1}, "objective": {"advantage_sign": advantage_sign}},
        "pipeline": {"steps": steps, "queries_per_step": 4, "rollouts_per_query": 4, "dataset": str(questions)},
        "learners": {"main": learner, "sub": learner},
    }
