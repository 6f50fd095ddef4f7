"""TRL's GRPOTrainer on the work of `mgrpo bench grpo`, for the comparison that bench prints.

TRL is never installed into this project's environment: `trl_python()` builds a virtual environment of
its own under the model cache (models/cache.py `cache_root() / "venvs" / "trl-<version>"`) with
`pip install -c constraints.txt trl==TRL_VERSION transformers==<ours>` (torch comes from the
constraints file: the CPU build on disk; transformers pinned to the version this project runs, so both
sides load the same model code). When it cannot be built (no network, a resolution failure) it says
why and the comparison is skipped.

This file is also the script run in that environment (`python trl_peer.py SPEC.json`): it imports only
the standard library at the top, and TRL, transformers and torch inside `_train`. Given the bench model
directory, the same prompts (the system prompt and question of mgrpo_actors/envs/arithmetic.py
`arithmetic_questions`, through the model's chat template), the numeric-match reward (1.0 for a valid
`<answer>` block with the right number, 0.1 for a valid one with another, 0 without one: R_M of plain
GRPO), the same generation budget, temperature, batch shape (prompts × completions, the whole batch in
one forward/backward), lr, AdamW settings and gradient clipping, one optimizer step per batch, no KL, on
the CPU with the same torch thread count, it trains for N steps and prints one JSON line: the seconds
of each step (from one step's end to the next, generation, reward, forward, backward and optimizer
step all inside) and their median without the first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["TRL_VERSION", "PeerSpec", "run_peer", "trl_python"]

TRL_VERSION = "1.16.0"  # resolves with torch 2.13.0 and transformers 5.x (requires transformers >= 4.56.2)
INSTALL_TIMEOUT_S = 1800
_DONE = ".complete"  # written last: an environment without it is rebuilt


@dataclass(frozen=True)
class PeerSpec:
    """The work both trainers do (mgrpo_actors/bench/grpo.py fills it from the job's config)."""

    model_dir: str
    system_prompt: str
    questions: list[dict[str, str]]  # {"question", "answer"}: the dataset both draw their prompts from
    prompts_per_step: int
    completions_per_prompt: int
    max_new_tokens: int
    stop_token_ids: list[int]  # eos and the closing tags the agent stops on (agents/episode.py action_stop_ids)
    temperature: float
    top_p: float
    top_k: int
    lr: float
    weight_decay: float
    max_grad_norm: float
    steps: int
    threads: int
    seed: int = 0


def _constraints() -> Path:
    return Path(__file__).resolve().parents[2] / "constraints.txt"


def venv_dir() -> Path:
    """Where TRL's environment lives."""
    from mgrpo_actors.models.cache import cache_root

    return cache_root() / "venvs" / f"trl-{TRL_VERSION}"


def trl_python(say=print) -> tuple[Path | None, str]:
    """(the python of TRL's environment, "") once it is built, or (None, why not)."""
    from importlib.metadata import version

    target = venv_dir()
    python = target / "bin" / "python"
    if (target / _DONE).exists() and python.exists():
        return python, ""
    constraints = _constraints()
    if not constraints.exists():
        return None, f"no constraints file at {constraints} (it pins torch to the CPU build)"
    shutil.rmtree(target, ignore_errors=True)  # a half-built one
    target.parent.mkdir(parents=True, exist_ok=True)
    requirements = [f"trl=={TRL_VERSION}", f"transformers=={version('transformers')}"]
    say(f"installing {' '.join(requirements)} into {target} (once; torch from {constraints})…")
    commands = (
        [sys.executable, "-m", "venv", str(target)],
        [str(python), "-m", "pip", "install", "-q", "-c", str(constraints), *requirements],
    )
    try:
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                shutil.rmtree(target, ignore_errors=True)
                return None, f"`{' '.join(command[-4:])}` failed (exit {done.returncode}): " + " / ".join(tail)
    except (OSError, subprocess.TimeoutExpired) as error:
        shutil.rmtree(target, ignore_errors=True)
        return None, f"could not build TRL's environment: {error}"
    (target / _DONE).touch()
    return python, ""


def run_peer(spec: PeerSpec, spec_path: Path, timeout_s: float = 1800, say=print) -> dict[str, Any]:
    """Train TRL on `spec` in its own environment: {"s_per_step": median without the first, "steps": [...],
    "trl": version, ...}, or {"skipped": why}."""
    python, why = trl_python(say)
    if python is None:
        return {"skipped": why}
    spec_path.write_text(json.dumps(asdict(spec)))
    try:
        done = subprocess.run(
            [str(python), str(Path(__file__).resolve()), str(spec_path)],
            env={**os.environ, "OMP_NUM_THREADS": str(spec.threads), "TOKENIZERS_PARALLELISM": "false"},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"TRL's run took over {timeout_s:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        return {"skipped": f"TRL's run failed (exit {done.returncode}): {tail}"}
    return json.loads(lines[-1])


# ---- the script, run in TRL's environment -------------------------------------------------------------
_ANSWER = re.compile(r"\s*(?:<think>(?:(?!<think>|</think>|<answer>).)*</think>\s*)?<answer>(.*?)</answer>\s*", re.S)
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def plain_reward(completion: str, answer: str) -> float:
    """R_M of plain GRPO: 1.0 for a valid answer block with the right number, 0.1 for a valid one, else 0."""
    from decimal import Decimal, InvalidOperation

    for end in ("<|im_end|>", "<|endoftext|>"):
        completion = completion.replace(end, "")
    match = _ANSWER.fullmatch(completion)
    if match is None:
        return 0.0
    said = match.group(1).strip().replace("\u2212", "-")
    try:
        right = bool(_NUMBER.fullmatch(said)) and Decimal(said) == Decimal(answer)
    except InvalidOperation:
        right = False
    return 1.0 if right else 0.1


def _train(spec: PeerSpec) -> dict[str, Any]:
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(spec.threads)
    tokenizer = AutoTokenizer.from_pretrained(spec.model_dir)
    model = AutoModelForCausalLM.from_pretrained(spec.model_dir, dtype=torch.float32)
    model.generation_config.eos_token_id = list(spec.stop_token_ids)  # TRL stops and masks on these
    rows = [
        {
            "prompt": [{"role": "system", "content": spec.system_prompt}, {"role": "user", "content": q["question"]}],
            "answer": q["answer"],
        }
        for q in spec.questions
    ]

    def reward(completion_ids: list[list[int]], answer: list[str], **_: Any) -> list[float]:
        texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=False)
        return [plain_reward(text, a) for text, a in zip(texts, answer, strict=True)]

    ends: list[float] = []
    threads: list[int] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            torch.set_num_threads(spec.threads)  # accelerate may have set its own
            threads.append(torch.get_num_threads())
            ends.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

    batch = spec.prompts_per_step * spec.completions_per_prompt
    config = GRPOConfig(
        output_dir=str(Path(spec.model_dir).parent / ".trl-peer-out"),
        per_device_train_batch_size=batch,  # completions per step: prompts_per_step prompts × num_generations
        num_generations=spec.completions_per_prompt,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,  # one optimizer step per generated batch
        max_completion_length=spec.max_new_tokens,
        temperature=spec.temperature,
        top_p=spec.top_p,
        top_k=spec.top_k,
        beta=0.0,
        learning_rate=spec.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=spec.weight_decay,
        max_grad_norm=spec.max_grad_norm,
        optim="adamw_torch",
        max_steps=spec.steps,
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=spec.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    trainer.train()
    steps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    lengths = [entry[k] for entry in trainer.state.log_history for k in ("completions/mean_length",) if k in entry]
    return {
        "trl": trl.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "threads": threads[0] if threads else torch.get_num_threads(),
        "steps": steps,
        "s_per_step": statistics.median(steps[1:] or steps),
        "mean_reward": statistics.fmean(rewards) if rewards else None,
        "mean_completion_tokens": statistics.fmean(lengths) if lengths else None,
    }


def main(argv: list[str]) -> int:
    spec = PeerSpec(**json.loads(Path(argv[1]).read_text()))
    print(json.dumps(_train(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
