"""The learner's step on a real tiny model under DeepSpeed (ZeRO-2, CPU, gloo): samples with positive
advantage become more likely, those with negative advantage less, placeholders change nothing, and the
reported loss is the clipped objective of the whole batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.alignment.batch_rows import BatchRow, placeholder_row, rows_to_batch
from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.engines import SamplingParams, make_engine
from mgrpo_actors.engines.logprobs import token_log_probs
from mgrpo_actors.learner.micro_batches import micro_batches
from mgrpo_actors.learner.trainer import PolicyTrainer
from mgrpo_actors.models.loader import load_model

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
    trainer = PolicyTrainer(
        model, tokenizer.pad_token_id, LearnerConfig(lr=1e-2, micro_batch_samples=2), ObjectiveConfig()
    )
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
    stats = trainer.apply(
        rows_to_batch("r", "sub", 0, "b1", [placeholder_row(f"q/-/r{i}/-#0", "placeholder") for i in range(3)])
    )
    assert stats.samples == 0 and stats.micro_batches == 0
    assert all(torch.equal(weights[n], p.detach()) for n, p in trainer.module.named_parameters())


@pytest.mark.parametrize("micro", [1, 3])
def test_accumulated_gradients_equal_the_full_batch_gradient_of_the_objective(tiny, micro):
    """docs/method.md §Objective: gradient accumulation must not change the loss scale. Under ZeRO-0 the
    accumulated .grad after every micro-batch equals the gradient of the clipped loss of the whole batch
    computed directly with torch (token-mean over all loss tokens)."""
    import copy

    from mgrpo_actors.algo.objective import clipped_policy_loss

    model, tokenizer = tiny
    reference = copy.deepcopy(model).float().train()
    rows = _sampled_rows(reference, tokenizer, 4)
    rows[1] = BatchRow(
        rows[1].sample_id, "original", rows[1].token_ids, rows[1].loss_mask, rows[1].logprobs - 0.3, 0.5, 1.0, 0.0, 0
    )
    batch = rows_to_batch("r", "main", 0, "b2", rows)
    (mb,) = micro_batches(batch, 16, 0)
    logits = reference(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
    loss, _ = clipped_policy_loss(
        token_log_probs(logits, mb.targets, mb.sampling),
        mb.old_logprobs,
        mb.advantages,
        mb.loss_mask,
        ObjectiveConfig(),
    )
    loss.backward()
    trainer = PolicyTrainer(
        copy.deepcopy(reference),
        tokenizer.pad_token_id,
        LearnerConfig(zero_stage=0, micro_batch_samples=micro),
        ObjectiveConfig(),
    )
    trainer.module.zero_grad()
    totals, num_micro, _ = trainer.accumulate(batch)
    assert num_micro == -(-4 // micro) and totals["loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
    expected = dict(reference.named_parameters())
    for name, param in trainer.module.named_parameters():
        torch.testing.assert_close(param.grad, expected[name].grad, rtol=1e-4, atol=1e-6)
