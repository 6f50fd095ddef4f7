"""The learner's step on a real tiny model under DeepSpeed (ZeRO-2, CPU, gloo): samples with positive
advantage become more likely, those with negative advantage less, placeholders change nothing, and the
reported loss is the clipped objective of the whole batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.engines import SamplingParams, make_engine
from mgrpo_actors.engines.logprobs import token_log_probs
from mgrpo_actors.learner.micro_batches import micro_batches
from mgrpo_actors.learner.trainer import PolicyTrainer
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.pipeline.batch_rows import BatchRow, placeholder_row, rows_to_batch

pytestmark = pytest.mark.timeout(240)

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=12, seed=0)


def _sampled_rows(model, tokenizer, n: int) -> list[BatchRow]:
    """n generations of the tiny model itself, as batch rows (prompt masked, sampled tokens with their logprobs)."""
    engine = make_engine("hf", model, tokenizer)
    prompt = tokenizer("the answer is", add_special_tokens=False)["input_ids"]
    rows = []
    for i, generation in enumerate(engine.generate([prompt] * n, PARAMS)):
        ids = np.array(prompt + generation.token_ids, np.int32)
        mask = np.array([0] * len(prompt) + [1] * len(generation.token_ids), np.uint8)
        logprobs = np.concatenate([np.zeros(len(prompt), np.float32), generation.logprobs])
        advantage = 1.0 if i % 2 == 0 else -1.0
        rows.append(BatchRow(f"q/a/r{i}", "original", ids, mask, logprobs, advantage, 1.0, 0.0, 0))
    return rows


def _sequence_logprobs(model, batch) -> np.ndarray:  # noqa: ANN001
    with torch.no_grad():
        out = []
        for mb in micro_batches(batch, 64, 0):
            logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
            lp = token_log_probs(logits, mb.targets, mb.sampling)
            out += (lp * mb.loss_mask).sum(-1).tolist()
    return np.array(out)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny:main")


def test_a_step_moves_probability_toward_positive_advantages_and_away_from_negative(tiny):
    model, tokenizer = tiny
    rows = _sampled_rows(model, tokenizer, 4)
    batch = rows_to_batch("r", "main", 0, "b0", [*rows, placeholder_row("q/-/r9", "failed")])
    before = _sequence_logprobs(model, batch)
    trainer = PolicyTrainer(model, tokenizer.pad_token_id, LearnerConfig(lr=1e-2, micro_batch_samples=2), ObjectiveConfig())
    stats = trainer.apply(batch)
    after = _sequence_logprobs(trainer.module, batch)
    assert stats.samples == 4 and stats.micro_batches == 2 and stats.tokens == sum(int(r.loss_mask.sum()) for r in rows)
    # At the behaviour policy the ratio is 1: the loss is −mean over tokens of A, and nothing is clipped.
    expected = -sum(r.advantage * int(r.loss_mask.sum()) for r in rows) / stats.tokens
    assert stats.loss == pytest.approx(expected, abs=1e-4) and stats.ratio_mean == pytest.approx(1.0, abs=1e-4)
    assert stats.clip_fraction == 0.0
    gained = after - before
    assert gained[0] > 0 and gained[2] > 0 and gained[1] < 0 and gained[3] < 0, gained


def test_a_batch_of_placeholders_takes_no_step(tiny):
    model, tokenizer = tiny
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = PolicyTrainer(model, tokenizer.pad_token_id, LearnerConfig(lr=1e-2), ObjectiveConfig())
    stats = trainer.apply(rows_to_batch("r", "sub", 0, "b1", [placeholder_row(f"q/-/r{i}/-#0", "placeholder") for i in range(3)]))
    assert stats.samples == 0 and stats.micro_batches == 0
    assert all(torch.equal(weights[n], p.detach()) for n, p in trainer.module.named_parameters())
