"""Arithmetic questions, the prompt set of plain GRPO runs (deploy/configs/grpo.yaml, `mgrpo bench grpo`):
"What is 17 - 5?" with its integer answer, seeded, as ordinary Questions (any JSONL of
{id, question, answer} serves the same way). Score them with `agents.correct_judge: numeric-match`.

    mgrpo_actors.envs.dataset.write_questions(path, arithmetic_questions(200))
"""

from __future__ import annotations

import operator
import random

from mgrpo_actors.envs.qa import Question

__all__ = ["OPERATIONS", "arithmetic_questions"]

OPERATIONS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def arithmetic_questions(count: int, seed: int = 0, max_operand: int = 20) -> list[Question]:
    """`count` questions "What is a <op> b?" with a, b in [0, max_operand] and op one of OPERATIONS."""
    if count < 1 or max_operand < 1:
        raise ValueError(f"arithmetic_questions needs count >= 1 and max_operand >= 1, got {count}, {max_operand}")
    draw = random.Random(seed)
    questions = []
    for i in range(count):
        a, b = draw.randint(0, max_operand), draw.randint(0, max_operand)
        symbol = draw.choice(list(OPERATIONS))
        answer = OPERATIONS[symbol](a, b)
        questions.append(
            Question(id=f"arith-{seed}-{i:05d}", question=f"What is {a} {symbol} {b}?", answer=str(answer))
        )
    return questions
