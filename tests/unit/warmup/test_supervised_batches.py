"""The supervised warm-up's batching and schedule (warmup/supervised.py): samples padded into one forward pass learn
exactly what one pass each does, the lr follows its ramp and decay, pages and final turns mix in at their shares."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from mgrpo_actors.models.loader import load_model
from mgrpo_actors.warmup.supervised import (
    Demonstration,
    TextSample,
    WarmupConfig,
    _accumulate,
    _draws,
    _padded,
    _summed_loss,
    demonstration_tokens,
    final_turn_only,
    warm_up_trajectories,
)


@dataclass(frozen=True)
class Episode:
    """What the warm-up reads of a trajectory: its ids and the agent-token mask."""

    token_ids: np.ndarray
    loss_mask: np.ndarray


def _episodes(vocab: int) -> list[Episode]:
    rng = np.random.default_rng(0)
    episodes = []
    for length in (7, 19, 12, 30, 5, 23):  # mixed lengths: padding on every row but the longest
        ids = rng.integers(3, vocab, length)
        mask = (rng.random(length) < 0.5).astype(np.uint8)
        mask[-1] = 1
        episodes.append(Episode(ids, mask))
    return episodes


def _trained(micro_batch: int, texts=(), share=0.0, steps: int = 3) -> tuple[dict[str, torch.Tensor], list[float]]:
    model, _ = load_model("tiny:main")
    cfg = WarmupConfig(steps=steps, batch_size=4, lr=1e-2, seed=3, micro_batch=micro_batch, max_grad_norm=1.0)
    losses = warm_up_trajectories(model, _episodes(model.config.vocab_size), cfg, texts=texts, text_share=share).losses
    return {name: p.detach().clone() for name, p in model.named_parameters()}, losses


def _gradients(samples, micro_batch: int) -> dict[str, torch.Tensor]:
    """The gradient of one step's token-mean loss over `samples`, `micro_batch` of them per padded pass, as the
    warm-up computes it."""
    model, _ = load_model("tiny:main")
    _accumulate(model, list(samples), micro_batch, 0, bf16=False, learnt_only=True)
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _by_hand(samples, spec: str = "tiny:main") -> tuple[float, dict[str, torch.Tensor]]:
    """The same loss and gradient by hand: each sample alone (no padding), the model's full logits at every position,
    the cross-entropy over the loss mask's next tokens summed, divided by their count."""
    model, _ = load_model(spec)
    tokens = sum(int(sample.loss_mask[1:].sum()) for sample in samples)
    total = 0.0
    for sample in samples:
        ids = torch.from_numpy(sample.token_ids.astype(np.int64))[None]
        learnt = torch.from_numpy(sample.loss_mask[1:].astype(bool))
        if not bool(learnt.any()):
            continue
        logits = model(input_ids=ids).logits[0, :-1]
        loss = torch.nn.functional.cross_entropy(logits[learnt], ids[0, 1:][learnt], reduction="sum") / tokens
        loss.backward()
        total += float(loss)
    return total, {name: p.grad.clone() for name, p in model.named_parameters()}


def test_padded_micro_batches_compute_the_gradient_of_one_pass_per_sample():
    samples = _episodes(500)
    one, padded = _gradients(samples, 1), _gradients(samples, 4)
    assert any(bool(g.abs().sum() > 0) for g in one.values())
    for name in one:
        torch.testing.assert_close(padded[name], one[name], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("learnt_only", [True, False])
@pytest.mark.parametrize("spec", ["tiny:main", "tiny:web-sub"])  # a Llama, and a Qwen2 (biased q, k, v)
def test_the_step_s_loss_and_gradient_equal_the_full_logits_by_hand(learnt_only, spec):
    """No attention mask on right-padded rows, and (learnt_only) the output layer on the learnt positions alone: the
    same loss and gradient as each sample alone with the model's full logits; a row with nothing to learn adds none."""
    samples = [*_episodes(500), Episode(np.arange(3, 40), np.zeros(37, dtype=np.uint8))]
    model, _ = load_model(spec)
    from mgrpo_actors.learner.forward import chunkable

    assert chunkable(model, model)  # both take the learnt-positions path in the warm-up
    loss = _accumulate(model, list(samples), 4, 0, bf16=False, learnt_only=learnt_only)
    ours = {name: p.grad.clone() for name, p in model.named_parameters()}
    expected_loss, expected = _by_hand(samples, spec)
    assert loss == pytest.approx(expected_loss, rel=1e-5) and loss > 0
    for name in expected:
        torch.testing.assert_close(ours[name], expected[name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("learnt_only", [True, False])
def test_the_output_layer_runs_on_the_learnt_positions_only_when_asked(learnt_only):
    model, _ = load_model("tiny:main")
    seen = []
    model.get_output_embeddings().register_forward_hook(lambda layer, args, out: seen.append(tuple(args[0].shape)))
    samples = _episodes(500)[:4]
    ids, targets = _padded(samples, 0)
    _summed_loss(model, ids, targets, bf16=False, learnt_only=learnt_only)
    learnt = int((targets != -100).sum())
    hidden = model.config.hidden_size
    if learnt_only:  # the model's own head on its last position only, then ours on the learnt positions
        assert seen == [(4, 1, hidden), (learnt, hidden)] and learnt < targets.numel()
    else:
        assert seen == [(4, ids.shape[1], hidden)]


def test_the_loop_takes_the_learnt_positions_path_where_the_model_allows_it(monkeypatch):
    from mgrpo_actors.warmup import supervised

    flags = []
    real = supervised._summed_loss
    monkeypatch.setattr(
        supervised, "_summed_loss", lambda *args, **kwargs: flags.append(args[-1]) or real(*args, **kwargs)
    )
    cfg = WarmupConfig(steps=1, batch_size=2, lr=1e-3)
    warm_up_trajectories(load_model("tiny:main")[0], _episodes(500), cfg)
    monkeypatch.setattr(supervised, "chunkable", lambda forward, module: False)
    warm_up_trajectories(load_model("tiny:main")[0], _episodes(500), cfg)
    assert flags == [True, True, False, False]


def test_a_step_with_nothing_to_learn_moves_no_weight():
    """Every sample's loss mask 0: no micro-batch runs, every gradient stays None, and AdamW (weight decay 0.01 by
    default) leaves every weight as it was."""
    nothing = [Episode(np.arange(3, 12), np.zeros(9, np.uint8)), Episode(np.arange(5, 30), np.zeros(25, np.uint8))]
    model, _ = load_model("tiny:main")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    losses = warm_up_trajectories(model, nothing, WarmupConfig(steps=2, batch_size=2, lr=1e-2, micro_batch=2)).losses
    assert losses == [0.0, 0.0]
    for name, p in model.named_parameters():
        assert p.grad is None
        torch.testing.assert_close(p.detach(), before[name], rtol=0, atol=0)


@pytest.mark.parametrize("micro_batch", [2, 4])  # 2: the step's 4 samples sorted by length into 2 passes
def test_the_warm_up_loss_is_the_same_batched_or_not(micro_batch):
    (_, one), (_, padded) = _trained(1, steps=1), _trained(micro_batch, steps=1)
    assert padded == pytest.approx(one, rel=1e-5) and one[0] > 0


def test_a_page_is_learnt_on_every_token():
    """One step on a page alone: its loss is the mean cross-entropy over every next token of it, by hand."""
    page = TextSample(np.arange(3, 40))
    assert page.loss_mask.tolist() == [1] * 37
    model, _ = load_model("tiny:main")
    ids = torch.from_numpy(page.token_ids.astype(np.int64))[None, :]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1]
    by_hand = float(torch.nn.functional.cross_entropy(logits, ids[0, 1:]))
    cfg = WarmupConfig(steps=1, batch_size=1, lr=1e-3)
    losses = warm_up_trajectories(model, _episodes(500), cfg, texts=[page], text_share=0.999999).losses
    assert losses[0] == pytest.approx(by_hand, rel=1e-5)


class _RecordingAdamW(torch.optim.AdamW):
    """AdamW that records the lr each of its steps used and the gradient norm it saw."""

    used: list[float] = []
    norms: list[float] = []

    def step(self, closure=None):
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        _RecordingAdamW.norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        _RecordingAdamW.used.append(self.param_groups[0]["lr"])
        return super().step(closure)


def test_the_loop_steps_the_schedule_and_clips_the_gradient(monkeypatch):
    from mgrpo_actors.warmup import supervised

    monkeypatch.setattr(supervised.torch.optim, "AdamW", _RecordingAdamW)
    _RecordingAdamW.used, _RecordingAdamW.norms = [], []
    cfg = WarmupConfig(steps=6, batch_size=2, lr=0.5, lr_ramp_steps=2, lr_decay=True, max_grad_norm=1e-3)
    model, _ = load_model("tiny:main")
    warm_up_trajectories(model, _episodes(500), cfg)
    assert _RecordingAdamW.used == pytest.approx([0.5 * cfg.lr_factor(s) for s in range(6)])
    assert _RecordingAdamW.used == pytest.approx([0.25, 0.5, 0.5, 0.35, 0.2, 0.05])
    assert max(_RecordingAdamW.norms) <= 1e-3 * (1 + 1e-4)  # every step's gradient clipped to the norm


def test_no_pages_draws_exactly_as_before_and_a_share_mixes_them_in():
    episodes, pages = list(range(10)), [TextSample(np.arange(4))]
    assert _draws(random.Random(5), episodes, [(pages, 0.0)], 8) == random.Random(5).choices(episodes, k=8)
    drawn = _draws(random.Random(5), episodes, [(pages, 0.3)], 2000)
    share = sum(isinstance(sample, TextSample) for sample in drawn) / len(drawn)
    assert 0.26 < share < 0.34


def test_pages_alone_draw_as_before_final_turns_came_and_both_mix_by_their_shares():
    episodes, pages, finals = list(range(10)), [TextSample(np.arange(4))], ["final"]
    # the draws of pages alone, as the loop made them before final turns were a pool (one uniform, one choice)
    before, rng = [], random.Random(7)
    for _ in range(50):
        before.append(rng.choice(pages) if rng.random() < 0.3 else rng.choice(episodes))
    assert _draws(random.Random(7), episodes, [(pages, 0.3), (finals, 0.0)], 50) == before
    assert _draws(random.Random(7), episodes, [(pages, 0.3), ([], 0.5)], 50) == before  # an empty pool is none
    drawn = _draws(random.Random(7), episodes, [(pages, 0.2), (finals, 0.5)], 4000)
    assert 0.17 < sum(isinstance(s, TextSample) for s in drawn) / 4000 < 0.23
    assert 0.46 < drawn.count("final") / 4000 < 0.54


def test_a_final_turn_sample_learns_the_last_turn_s_tokens_only():
    _, tokenizer = load_model("tiny:main")
    opening = ({"role": "system", "content": "Answer."}, {"role": "user", "content": "Who founded Aldora?"})
    turns = ('<tool_call>{"name": "search", "arguments": {"query": "Aldora"}}</tool_call>', "Aldora: Brevik.")
    episode = demonstration_tokens(tokenizer, Demonstration(opening, (*turns, "<answer>Brevik</answer>")))
    assert len(episode.turn_spans) == 2  # the tool call, then the answer
    final = final_turn_only(episode)
    start, end = episode.turn_spans[-1]
    expected = np.zeros_like(episode.loss_mask)
    expected[start:end] = 1
    np.testing.assert_array_equal(final.loss_mask, expected)
    assert final.loss_mask.sum() < episode.loss_mask.sum()
    np.testing.assert_array_equal(final.token_ids, episode.token_ids)
    _, targets = _padded([final], pad_id=0)
    learnt = {position: int(t) for position, t in enumerate(targets[0]) if t != -100}
    # the output at position p predicts id p + 1: from the id before the answer to its last but one
    assert learnt == {p - 1: int(episode.token_ids[p]) for p in range(start, end)}
    learnt = list(learnt.values())
    assert "Brevik" in tokenizer.decode(learnt) and "search" not in tokenizer.decode(learnt)


def test_lr_ramps_then_decays_to_a_tenth():
    cfg = WarmupConfig(steps=11, lr=1.0, lr_ramp_steps=4, lr_decay=True)
    # ramp: (s + 1) / 4 for s < 4; then 1 - 0.9 * (s - 4) / 6 down to 0.1 at the last step (10)
    expected = [0.25, 0.5, 0.75, 1.0, 1.0, 0.85, 0.7, 0.55, 0.4, 0.25, 0.1]
    assert [round(cfg.lr_factor(s), 6) for s in range(11)] == expected
    assert [WarmupConfig(steps=5).lr_factor(s) for s in range(5)] == [1.0] * 5


@pytest.mark.parametrize(
    "bad", [{"micro_batch": 0}, {"lr_ramp_steps": -1}, {"lr_ramp_steps": 150}, {"max_grad_norm": -0.5}]
)
def test_bad_batching_settings_are_refused(bad):
    with pytest.raises(ValueError, match="micro_batch >= 1"):
        WarmupConfig(**bad)
