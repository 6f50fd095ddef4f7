"""An interrupted warm-up resumes (warmup/checkpoint.py, supervised.py): from its last checkpoint it takes the very
steps it would have taken, so the weights and losses equal an uninterrupted warm-up's bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mgrpo_actors.models.loader import load_model
from mgrpo_actors.warmup.checkpoint import TrainingCheckpoint, WarmupProgress
from mgrpo_actors.warmup.supervised import TextSample, WarmupConfig, warm_up_trajectories
from tests.unit.warmup.test_supervised_batches import _episodes

CFG = WarmupConfig(steps=6, batch_size=4, lr=1e-2, seed=5, micro_batch=2, lr_ramp_steps=2, lr_decay=True)


def _train(checkpoint: TrainingCheckpoint | None = None, stop_after: int | None = None):
    """A fresh tiny:main warmed up on mixed episodes and pages; `stop_after` steps interrupt it (a Ctrl-C)."""
    model, _ = load_model("tiny:main")
    pages = [TextSample(np.arange(3, 40))]

    def progress(step: int, loss: float) -> None:
        if stop_after is not None and step + 1 == stop_after:
            raise KeyboardInterrupt

    done = warm_up_trajectories(
        model, _episodes(500), CFG, progress, texts=pages, text_share=0.3, checkpoint=checkpoint
    )
    return model, done


def test_a_resumed_warm_up_ends_with_the_uninterrupted_ones_weights_bit_for_bit(tmp_path):
    whole, uninterrupted = _train()
    assert uninterrupted.step == 6 and len(uninterrupted.losses) == 6 and uninterrupted.resumed_at == []

    saved = tmp_path / "main.checkpoint.pt"
    with pytest.raises(KeyboardInterrupt):  # saved after every step (every_seconds tiny); stopped after step 4
        _train(TrainingCheckpoint(saved, every_seconds=1e-9), stop_after=4)
    assert saved.is_file() and torch.load(saved, weights_only=False)["step"] == 4  # saved before progress is told
    resumed_model, resumed = _train(TrainingCheckpoint(saved, every_seconds=1e-9))

    assert resumed.resumed_at == [4] and resumed.step == 6
    assert resumed.losses == uninterrupted.losses  # the first 4 from the checkpoint, the rest taken again
    for (name, a), b in zip(whole.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name
    assert resumed.seconds > 0


def test_no_checkpoint_is_written_for_the_last_step_nor_when_never_due(tmp_path):
    saved = tmp_path / "main.checkpoint.pt"
    _train(TrainingCheckpoint(saved, every_seconds=1e-9))
    assert torch.load(saved, weights_only=False)["step"] == 5  # the finished warm-up is saved by its caller
    never = tmp_path / "never.pt"
    _train(TrainingCheckpoint(never, every_seconds=0))
    assert not never.exists()


def test_a_second_interruption_resumes_again_and_says_both(tmp_path):
    saved = tmp_path / "main.checkpoint.pt"
    with pytest.raises(KeyboardInterrupt):
        _train(TrainingCheckpoint(saved, every_seconds=1e-9), stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        _train(TrainingCheckpoint(saved, every_seconds=1e-9), stop_after=5)
    model, done = _train(TrainingCheckpoint(saved, every_seconds=1e-9))
    whole, uninterrupted = _train()
    assert done.resumed_at == [2, 5] and done.losses == uninterrupted.losses
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), model.state_dict().values()))


def test_an_interruption_is_saved_though_no_checkpoint_was_due(tmp_path):
    saved = tmp_path / "main.checkpoint.pt"
    with pytest.raises(KeyboardInterrupt):
        _train(TrainingCheckpoint(saved, every_seconds=3600), stop_after=3)
    assert torch.load(saved, weights_only=True)["step"] == 3


def test_torch_random_state_and_an_unreadable_checkpoint(tmp_path):
    """torch's random state comes back with the rest (dropout would draw from it); an unreadable file (a disk that
    failed mid-write) is dropped and the loop starts from step 0 rather than never."""
    model, _ = load_model("tiny:main")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    draw = __import__("random").Random(0)
    checkpoint = TrainingCheckpoint(tmp_path / "c.pt")
    torch.manual_seed(11)
    checkpoint.save(2, model, optimizer, schedule, draw, WarmupProgress(2, [1.0, 0.5], 3.0, []))
    expected = torch.rand(4)
    torch.manual_seed(99)
    assert checkpoint.load(model, optimizer, schedule, draw) == WarmupProgress(2, [1.0, 0.5], 3.0, [2])
    assert torch.equal(torch.rand(4), expected)

    checkpoint.path.write_bytes(b"not a checkpoint")
    assert checkpoint.load(model, optimizer, schedule, draw) == WarmupProgress() and not checkpoint.path.exists()
