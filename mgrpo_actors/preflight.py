"""The inputs a node's roles read, checked before anything starts (no nats-server, no connection, no weights
loaded): a bad input is one clear line and exit 2 up front, never an actor dying mid-start or a run whose every
rollout fails. `mgrpo run` and `mgrpo-node` both call `check_inputs` (through actors/node.py `preflight`).

- The dataset of a role that reads it (controller, aligners): encoding, JSON and fields per line, an empty file,
  a split that cannot fill a step (envs/dataset.py names the file and line).
- The models of the roles that load them (agents and learners, and a learner's KL reference): a directory
  missing config.json, weights, tokenizer.json or a chat template (models/loader.py names what is missing).
- Questions over M's context budget: a question whose own tokens leave M no room to answer within
  `agents.main.max_context_tokens` can only fail every rollout, so it is refused by id and file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mgrpo_actors.config import NodeConfig

__all__ = ["DATASET_ROLES", "MODEL_ROLES", "InputError", "check_inputs", "over_budget"]

# Roles that read the run's questions, and the agent model each model-loading role loads.
DATASET_ROLES = ("controller", "main-aligner", "sub-aligner")
MODEL_ROLES = {"main-agent": "main", "main-learner": "main", "sub-agent": "sub", "sub-learner": "sub"}


class InputError(ValueError):
    """An input a role reads cannot serve the run (the message names the file, line or key)."""


def check_inputs(config: NodeConfig, roles: Sequence[str], sub_types: Sequence[str] | None = None) -> None:
    """Every input `roles` read (the sub side's for `sub_types`, None: every type of the run), checked now;
    InputError (or the loader's ValueError) naming what is wrong."""
    served = tuple(sub_types or config.sub_types)
    models: dict[str, tuple[str, bool]] = {}  # key -> (model spec, with its tokenizer): each checked once
    for role in (role for role in roles if role in MODEL_ROLES):
        for side in ("main",) if MODEL_ROLES[role] == "main" else served:
            models[f"{_key(config, 'agents', side)}.model"] = (config.agent(side).model, True)
            reference = config.learner(side).reference
            if role.endswith("-learner") and reference is not None and config.trains(side):
                models[f"{_key(config, 'learners', side)}.reference"] = (reference, False)
    for key, (spec, tokenizer) in models.items():
        _check_model(key, spec, tokenizer)
    if any(role in DATASET_ROLES for role in roles):
        _check_dataset(config, roles)


def _key(config: NodeConfig, section: str, side: str) -> str:
    """The config key of `side`'s entry in `section` (agents or learners)."""
    if side == "main" or (side == "sub" and not config.agents.subs):
        return f"{section}.{side}"
    return f"{section}.subs.{side}" if section == "agents" or side in config.learners.subs else f"{section}.sub"


def _check_model(key: str, spec: str, tokenizer: bool = True) -> None:
    from mgrpo_actors.models.loader import load_tokenizer, resolve_model_dir

    try:
        directory = resolve_model_dir(spec)
        if tokenizer:
            load_tokenizer(directory)  # the chat template: every agent prompt is rendered with it
    except ValueError as exc:
        raise InputError(f"{key}: {exc}") from None


def _check_dataset(config: NodeConfig, roles: Sequence[str]) -> None:
    from mgrpo_actors.agents.setup import load_task_questions
    from mgrpo_actors.controller.questions import step_schedule

    if "controller" in roles:
        step_schedule(config)  # loads the dataset and checks every stage's split can fill a step
    if config.pipeline.dataset == "synthetic":
        return  # the built-in web is generated, not read (no need to build it again), its questions a sentence each
    questions = load_task_questions(config.pipeline, config.tools)
    texts = [(q.id, q.question) for split in questions.splits.values() for q in split]
    too_long = over_budget(texts, config.agents.main.model, config.agents.main.max_context_tokens)
    if too_long:
        shown = ", ".join(f"{qid!r} ({tokens} tokens)" for qid, tokens in too_long[:3])
        raise InputError(
            f"pipeline.dataset {config.pipeline.dataset!r}: {len(too_long)} question(s) leave M no room within "
            f"agents.main.max_context_tokens ({config.agents.main.max_context_tokens}): {shown}; shorten them or "
            "raise the budget"
        )


def over_budget(texts: Iterable[tuple[str, str]], model: str, budget: int) -> list[tuple[str, int]]:
    """(id, tokens) of every question whose text alone takes at least half of `budget` tokens of `model`'s
    tokenizer ([ours]: M's prompt, its turns and its sub-agent's results must fit beside the question)."""
    from mgrpo_actors.models.loader import load_tokenizer, resolve_model_dir

    items = list(texts)
    if not items:
        return []
    tokenizer = load_tokenizer(resolve_model_dir(model))
    # UTF-8 bytes bound tokens from above (a byte-level BPE token, or a byte-fallback one, holds >= 1 byte), so
    # only a question of budget / 2 bytes or more can be over: the others are never tokenised.
    suspects = [(qid, text) for qid, text in items if len(text.encode("utf-8")) >= budget // 2]
    if not suspects:
        return []
    counts = tokenizer([text for _, text in suspects], add_special_tokens=False)["input_ids"]
    return [(qid, len(ids)) for (qid, _), ids in zip(suspects, counts) if len(ids) >= budget // 2]
