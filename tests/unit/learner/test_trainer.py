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


@pytest.mark.parametrize(
    ("micro", "chunk", "recompute"), [(1, 1024, False), (3, 1024, False), (3, 4, True), (3, 0, False)]
)
def test_accumulated_gradients_equal_the_full_batch_gradient_of_the_objective(tiny, micro, chunk, recompute):
    """docs/method.md §Objective: gradient accumulation must not change the loss scale. Under ZeRO-0 the
    accumulated .grad after every micro-batch equals the gradient of the clipped loss of the whole batch
    computed directly with torch (token-mean over all loss tokens), whether the logprobs come from the
    lm_head per chunk of loss positions (4: several chunks, recomputed in backward) or from the model's
    own logits (0), and with the layers' activations recomputed in backward (activation_checkpointing)."""
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
        LearnerConfig(
            zero_stage=0, micro_batch_samples=micro, logprob_chunk_tokens=chunk, activation_checkpointing=recompute
        ),
        ObjectiveConfig(),
    )
    assert trainer.logprob_chunk == (chunk or None)
    trainer.module.zero_grad()
    totals, num_micro, _ = trainer.accumulate(batch)
    assert num_micro == -(-4 // micro) and totals["loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
    expected = dict(reference.named_parameters())
    for name, param in trainer.module.named_parameters():
        torch.testing.assert_close(param.grad, expected[name].grad, rtol=1e-4, atol=1e-6)


def test_with_an_fp32_engine_the_learner_measures_no_mismatch(tiny):
    """docs/method.md §Objective: the mismatch figure is mean |logprob_learner − logprob_engine| per loss
    token; the hf engine sampling in fp32 from the same weights gives the learner's own logprobs."""
    import copy

    model, tokenizer = tiny
    rows = _sampled_rows(model, tokenizer, 4)
    batch = rows_to_batch("r", "main", 0, "b3", rows)
    objective = ObjectiveConfig(recompute_old_logprobs=True, tis_cap=2.0)
    trainer = PolicyTrainer(
        copy.deepcopy(model), tokenizer.pad_token_id, LearnerConfig(micro_batch_samples=2), objective
    )
    stats = trainer.apply(batch)
    assert stats.samples == 4 and stats.mismatch < 1e-4, stats
    assert stats.tis_weight_mean == pytest.approx(1.0, abs=1e-4) and stats.tis_clip_fraction == 0.0
    assert {"mismatch", "tis_weight_mean", "tis_clip_fraction"} <= set(stats.as_dict())
    assert stats.grad_norm > 0  # measured by the trainer itself on one rank (ZeRO-0)

    plain = PolicyTrainer(
        copy.deepcopy(model), tokenizer.pad_token_id, LearnerConfig(micro_batch_samples=4), ObjectiveConfig()
    )
    figures = plain.apply(batch).as_dict()
    assert figures["mismatch"] < 1e-4 and "tis_weight_mean" not in figures  # TIS off: not reported


def _plain_log_probs(model, row: BatchRow) -> np.ndarray:  # noqa: ANN001
    """log softmax of the model's logits at each target (temperature 1, no top-k/top-p), by hand: one row alone."""
    ids = torch.from_numpy(row.token_ids.astype(np.int64))[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].double()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0].numpy()


def test_mismatch_and_tis_statistics_are_token_weighted_over_micro_batches(tiny):
    """docs/method.md §Objective: engine logprobs set to the pre-step learner's (computed here by hand) minus δ_i
    on row i's loss tokens, so log π_learner_old/π_engine = δ_i; recompute + TIS at C = 1.2. Over micro-batches
    of 3 and 1 rows the step reports the token-weighted means Σ n_i δ_i / N, Σ n_i min(e^δ_i, C) / N, the
    fraction of tokens above C, and (ρ = 1) the loss −Σ A_i n_i min(e^δ_i, C) / N."""
    import copy

    model, tokenizer = tiny
    reference = copy.deepcopy(model).float().eval()
    rows = _sampled_rows(reference, tokenizer, 4)
    deltas, advantages, cap = (0.05, 0.15, 0.25, 0.4), (1.0, -1.0, 0.5, -2.0), 1.2
    shifted = []
    for row, delta, advantage in zip(rows, deltas, advantages):
        logprobs = np.concatenate([[0.0], _plain_log_probs(reference, row)]) - delta * row.loss_mask
        shifted.append(
            BatchRow(
                row.sample_id,
                "original",
                row.token_ids,
                row.loss_mask,
                logprobs.astype(np.float32),
                advantage,
                1.0,
                0.0,
                0,
            )
        )
    n = np.array([float(r.loss_mask[1:].sum()) for r in shifted])
    w = np.minimum(np.exp(deltas), cap)
    trainer = PolicyTrainer(
        copy.deepcopy(reference),
        tokenizer.pad_token_id,
        LearnerConfig(micro_batch_samples=3),
        ObjectiveConfig(recompute_old_logprobs=True, tis_cap=cap),
    )
    stats = trainer.apply(rows_to_batch("r", "main", 0, "b4", shifted))
    assert stats.micro_batches == 2 and stats.tokens == n.sum()
    assert stats.mismatch == pytest.approx(float((n * deltas).sum() / n.sum()), abs=1e-5)
    by_micro_batch = ((n[:3] * deltas[:3]).sum() / n[:3].sum() + deltas[3]) / 2  # what an unweighted mean would say
    assert abs(stats.mismatch - by_micro_batch) > 1e-3
    assert stats.tis_weight_mean == pytest.approx(float((n * w).sum() / n.sum()), abs=1e-5)
    assert stats.tis_clip_fraction == pytest.approx(float(n[2:].sum() / n.sum()))
    assert stats.loss == pytest.approx(float(-(np.array(advantages) * n * w).sum() / n.sum()), abs=1e-5)
    assert stats.ratio_mean == pytest.approx(1.0) and stats.clip_fraction == 0.0


def _grads(module) -> list[torch.Tensor]:  # noqa: ANN001
    return [p.grad.detach().clone() for p in module.parameters() if p.grad is not None]


@pytest.mark.parametrize("max_grad_norm", [0.5, 0.0])
def test_own_clipping_measures_and_clips_the_global_norm_as_deepspeed_would(tiny, max_grad_norm):
    """One rank runs ZeRO-0 whatever zero_stage says, without DeepSpeed's all-reduce and clipping; the trainer
    clips itself: norm = sqrt(Σ g²) over every parameter (the tied embedding once), each gradient × min(1,
    max_norm / (norm + 1e-6)) (DeepSpeed's clip_grad_norm_ formula), 0 = measured only; apply() reports it."""
    import copy

    from mgrpo_actors.learner.trainer import deepspeed_config

    model, tokenizer = tiny
    rows = _sampled_rows(model, tokenizer, 3)
    batch = rows_to_batch("r", "main", 0, "b5", rows)
    cfg = LearnerConfig(zero_stage=2, micro_batch_samples=2, max_grad_norm=max_grad_norm)
    assert (
        deepspeed_config(cfg)["gradient_clipping"] == 0.0 and deepspeed_config(cfg)["zero_optimization"]["stage"] == 0
    )
    assert deepspeed_config(cfg, world_size=2)["gradient_clipping"] == max_grad_norm
    trainer = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, ObjectiveConfig())
    assert trainer.zero_stage == 0 and trainer._own_clipping and not trainer.engine.enable_backward_allreduce
    trainer.module.zero_grad()
    trainer.accumulate(batch)
    before = _grads(trainer.module)
    norm = float(torch.stack([g.double().pow(2).sum() for g in before]).sum().sqrt())
    assert trainer._clip_gradients() == pytest.approx(norm, rel=1e-5)
    scale = min(1.0, max_grad_norm / (norm + 1e-6)) if max_grad_norm > 0 else 1.0
    assert scale < 1.0 or max_grad_norm == 0.0  # the case clips
    for got, grad in zip(_grads(trainer.module), before):
        torch.testing.assert_close(got, grad * scale, rtol=1e-5, atol=1e-7)

    fresh = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, ObjectiveConfig())
    assert fresh.apply(batch).grad_norm == pytest.approx(norm, rel=1e-5)


def test_bf16_on_one_rank_runs_zero0_and_deepspeed_reports_the_norm(tiny):
    """bf16: DeepSpeed's own optimizer wrapper clips; the norm it reports is that of the accumulated gradients."""
    import copy

    model, tokenizer = tiny
    batch = rows_to_batch("r", "main", 0, "b6", _sampled_rows(model, tokenizer, 3))
    cfg = LearnerConfig(dtype="bfloat16", micro_batch_samples=2)
    probe = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, ObjectiveConfig())
    assert probe.zero_stage == 0 and not probe._own_clipping
    probe.accumulate(batch)
    norm = float(torch.stack([g.double().pow(2).sum() for g in _grads(probe.module)]).sum().sqrt())
    trainer = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, ObjectiveConfig())
    assert trainer.apply(batch).grad_norm == pytest.approx(norm, rel=1e-4)


def test_a_model_with_dropout_scores_as_the_engine_sampled_ratio_one(tiny):
    """docs/method.md §Objective: the engines sample without dropout, so the learner scores without it: with
    attention dropout 0.5 in train mode the ratio on unchanged weights would be noise, here it is 1."""
    import copy

    model, tokenizer = tiny
    noisy = copy.deepcopy(model)
    layers = [m for m in noisy.modules() if hasattr(m, "attention_dropout")]
    assert layers
    for layer in layers:
        layer.attention_dropout = 0.5
    rows = _sampled_rows(noisy, tokenizer, 4)  # the engine samples in eval mode: no dropout
    batch = rows_to_batch("r", "main", 0, "b-dropout", rows)
    stats = PolicyTrainer(noisy, tokenizer.pad_token_id, LearnerConfig(micro_batch_samples=4), ObjectiveConfig()).apply(
        batch
    )
    assert stats.samples == 4
    assert stats.ratio_mean == pytest.approx(1.0, abs=1e-4) and stats.approx_kl < 1e-6, stats
    assert all(layer.attention_dropout == 0.0 for layer in layers)


def test_micro_batches_hold_rows_of_like_length_longest_first():
    # Rows of 5..40 tokens in no order, micro-batches of 3: each holds neighbours in length, so its padding
    # (to its longest row) is small; every row appears once, with its own sample id.
    lengths = [12, 40, 5, 33, 21, 8, 27, 16, 38]
    rows = [
        BatchRow(
            f"q/a/r{i}",
            "original",
            np.arange(3, 3 + n, dtype=np.int32),
            (np.arange(n) > 1).astype(np.uint8),
            np.zeros(n, np.float32),
            1.0,
            1.0,
            0.0,
            0,
        )
        for i, n in enumerate(lengths)
    ]
    mbs = micro_batches(rows_to_batch("r", "main", 0, "b", rows), 3, 0)
    seen = [sample for mb in mbs for sample in mb.sample_ids]
    assert sorted(seen) == sorted(r.sample_id for r in rows)
    by_id = {r.sample_id: len(r.token_ids) for r in rows}
    assert [by_id[s] for s in seen] == sorted(lengths, reverse=True)
    assert [mb.input_ids.shape[1] for mb in mbs] == [40, 27, 12]
