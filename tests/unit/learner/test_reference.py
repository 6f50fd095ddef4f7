"""The KL term's frozen reference in the learner (docs/method.md §Objective; mgrpo_actors/learner/reference.py),
on the real tiny model under DeepSpeed: by default the starting weights (so KL is 0 before the first step and
grows after), or a named model directory; frozen through the steps; still the starting weights on a resume,
from a checkpoint or into an already-resumed model; its gradient is the one torch gives directly."""

from __future__ import annotations

import copy

import pytest
import torch

from mgrpo_actors.algo.config import ObjectiveConfig
from mgrpo_actors.algo.objective import clipped_policy_loss
from mgrpo_actors.alignment.batch_rows import BatchRow, rows_to_batch
from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.engines.logprobs import token_log_probs
from mgrpo_actors.learner.checkpoints import Checkpoints
from mgrpo_actors.learner.micro_batches import micro_batches
from mgrpo_actors.learner.reference import reference_model
from mgrpo_actors.learner.trainer import PolicyTrainer
from mgrpo_actors.models.loader import load_model
from tests.unit.learner.test_trainer import _sampled_rows

pytestmark = pytest.mark.timeout(240)

KL = ObjectiveConfig(kl_coef=0.1)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny:main")


@pytest.fixture(scope="module")
def batch(tiny):
    """Four of the tiny model's own generations, advantages +1, −1, 0, −1 (the third has only the KL's gradient)."""
    model, tokenizer = tiny
    rows = _sampled_rows(model, tokenizer, 4)
    rows[2] = BatchRow(
        rows[2].sample_id, "original", rows[2].token_ids, rows[2].loss_mask, rows[2].logprobs, 0.0, 1.0, 0.0, 0
    )
    return rows_to_batch("r", "main", 0, "b0", rows)


def _shifted(model: torch.nn.Module, scale: float = 0.05, seed: int = 0) -> torch.nn.Module:
    """A copy of `model` with every weight moved by seeded noise: weights that differ from the start."""
    other = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in other.parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator))
    return other


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def _same(module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> bool:
    state = module.state_dict()
    return state.keys() == weights.keys() and all(torch.equal(state[n], weights[n]) for n in weights)


@pytest.mark.parametrize("chunk", [1024, 0])
def test_kl_is_zero_at_the_starting_weights_and_grows_as_the_policy_moves(tiny, batch, chunk):
    model, tokenizer = tiny
    cfg = LearnerConfig(lr=1e-3, micro_batch_samples=2, logprob_chunk_tokens=chunk)
    trainer = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, KL)
    assert trainer.reference.chunk == trainer.logprob_chunk == (chunk or None)  # scored as the policy is
    first = trainer.apply(batch)
    assert first.samples == 4  # the advantage-0 sample is trained on: its KL gradient is not 0
    assert first.kl_ref == pytest.approx(0.0, abs=1e-6) and first.kl_loss == pytest.approx(0.0, abs=1e-7)
    later = [trainer.apply(batch) for _ in range(3)]
    assert all(stats.kl_ref > 1e-6 for stats in later), [stats.kl_ref for stats in later]
    # kl_loss is the KL term's share of the loss: kl_coef × the token-mean KL under token-mean aggregation
    assert later[-1].kl_loss == pytest.approx(0.1 * later[-1].kl_ref, rel=1e-5)
    assert {"kl_ref", "kl_loss"} <= set(later[-1].as_dict())
    plain = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, ObjectiveConfig())
    assert plain.reference is None and not {"kl_ref", "kl_loss"} & set(plain.apply(batch).as_dict())


def test_the_reference_stays_frozen_through_the_steps(tiny, batch):
    model, tokenizer = tiny
    start = _weights(model)
    trainer = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, LearnerConfig(lr=1e-3), KL)
    reference = trainer.reference.module
    assert not reference.training and not any(p.requires_grad for p in reference.parameters())
    assert all(p.dtype == torch.float32 for p in reference.parameters())  # the learner's dtype
    for _ in range(2):
        trainer.apply(batch)
    assert all(p.grad is None for p in reference.parameters())
    assert _same(reference, start) and not _same(trainer.module, start)  # the policy moved, the reference did not


def test_a_reference_in_bf16_follows_the_learner_dtype(tiny):
    model, _ = tiny
    reference = reference_model(LearnerConfig(dtype="bfloat16"), KL, model)
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in reference.parameters())
    assert reference_model(LearnerConfig(), ObjectiveConfig(), model) is None  # no KL term: nothing built


def test_a_named_reference_directory_is_loaded_as_the_reference(tiny, batch, tmp_path):
    model, tokenizer = tiny
    other = _shifted(model)
    other.save_pretrained(tmp_path / "ref")
    tokenizer.save_pretrained(tmp_path / "ref")
    cfg = LearnerConfig(lr=1e-3, micro_batch_samples=2, reference=str(tmp_path / "ref"))
    trainer = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, KL)
    assert _same(trainer.reference.module, _weights(other))
    assert trainer.apply(batch).kl_ref > 1e-3  # the policy starts away from this reference


def test_a_reference_of_another_vocabulary_is_refused(tiny):
    model, _ = tiny
    agent = model.config.vocab_size
    with pytest.raises(ValueError, match=rf"'tiny:grpo' has a vocabulary of \d+ tokens, the agent's model {agent}:"):
        reference_model(LearnerConfig(reference="tiny:grpo"), KL, model)


def test_a_reference_built_before_a_resume_stays_the_starting_weights(tiny, batch):
    """What the learner actor does: the reference first, then the announced weights loaded into the model
    (actors/learner.py _resume); the trainer keeps the reference it is given, not a copy of its resumed model."""
    model, tokenizer = tiny
    start = _weights(model)
    resumed = copy.deepcopy(model)
    reference = reference_model(LearnerConfig(), KL, resumed)
    resumed.load_state_dict(_shifted(model).state_dict())
    assert _same(reference, start)
    trainer = PolicyTrainer(resumed, tokenizer.pad_token_id, LearnerConfig(lr=1e-3), KL, reference=reference)
    assert _same(trainer.reference.module, start)
    assert trainer.apply(batch).kl_ref > 1e-3  # the resumed policy is away from the start


def test_a_learner_resumed_from_its_checkpoint_keeps_the_starting_weights_as_reference(tiny, batch, tmp_path):
    model, tokenizer = tiny
    start = _weights(model)
    cfg = LearnerConfig(lr=1e-3, micro_batch_samples=4)
    trained = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, KL)
    for _ in range(2):
        trained.apply(batch)
    checkpoints = Checkpoints(tmp_path / "checkpoints")
    checkpoints.save(trained, tokenizer, "step1", {"step": 1})
    restarted = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, KL)  # as loaded again on restart
    assert checkpoints.load(restarted) == {"step": 1}
    assert _same(restarted.module, _weights(trained.module)) and _same(restarted.reference.module, start)
    assert restarted.apply(batch).kl_ref == pytest.approx(trained.apply(batch).kl_ref, rel=1e-4, abs=1e-9)


def test_the_accumulated_gradient_is_that_of_the_objective_with_the_kl_term(tiny, batch):
    """Under ZeRO-0, micro-batches of 3 and 1 rows, a reference away from the policy: .grad equals the
    gradient torch gives for the whole batch's loss with ref_logprobs from the reference's own logits."""
    model, tokenizer = tiny
    policy, reference = copy.deepcopy(model).float().train(), _shifted(model).eval()
    (mb,) = micro_batches(batch, 16, 0)
    with torch.no_grad():
        ref_logits = reference(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
    logits = policy(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
    loss, _ = clipped_policy_loss(
        token_log_probs(logits, mb.targets, mb.sampling),
        mb.old_logprobs,
        mb.advantages,
        mb.loss_mask,
        KL,
        ref_logprobs=token_log_probs(ref_logits, mb.targets, mb.sampling),
    )
    loss.backward()
    cfg = LearnerConfig(zero_stage=0, micro_batch_samples=3, logprob_chunk_tokens=4)
    trainer = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg, KL, reference=copy.deepcopy(reference))
    trainer.module.zero_grad()
    totals, num_micro, _ = trainer.accumulate(batch)
    assert num_micro == 2 and totals["loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
    expected = dict(policy.named_parameters())
    for name, param in trainer.module.named_parameters():
        torch.testing.assert_close(param.grad, expected[name].grad, rtol=1e-4, atol=1e-6)
