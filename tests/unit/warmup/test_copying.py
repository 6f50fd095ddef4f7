"""Copying practice (warmup/copying.py, warmup.copy_steps and warmup.copies): each sample is the start id and a run of
the episodes' ids written four times, learnt on the repeats; the first copy_steps train on it alone; a resumed warm-up
draws the same samples; `copied_share` tells a model that copies from one that does not; the lr decay spans the
later steps."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mgrpo_actors.config.warmup import WebWarmupConfig
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.warmup import supervised
from mgrpo_actors.warmup.checkpoint import TrainingCheckpoint
from mgrpo_actors.warmup.copying import LONGEST_RUN, SHORTEST_RUN, WRITINGS, CopyRuns, CopySample, copied_share
from mgrpo_actors.warmup.supervised import WarmupConfig, _draws, _padded, warm_up_trajectories
from tests.unit.warmup.test_supervised_batches import _episodes


def test_a_sample_is_the_start_id_then_a_run_written_four_times_learnt_from_the_second_writing_s_second_id():
    ids = np.array([7, 9, 11, 13, 400])
    pool = CopyRuns(np.concatenate([ids, ids[::-1]]), start_id=1, seed=3)
    lengths = set()
    for index in (0, 1, 2, 3, 12345, len(pool) - 1):
        sample = pool[index]
        n = (len(sample.token_ids) - 1) // WRITINGS
        lengths.add(n)
        assert SHORTEST_RUN <= n <= LONGEST_RUN and len(sample.token_ids) == 1 + WRITINGS * n
        assert sample.token_ids[0] == 1
        run = sample.token_ids[1 : n + 1]
        np.testing.assert_array_equal(sample.token_ids[1:], np.tile(run, WRITINGS))
        assert set(run.tolist()) <= set(ids.tolist())
        np.testing.assert_array_equal(np.flatnonzero(sample.loss_mask), np.arange(n + 2, len(sample.token_ids)))
        # the targets: every id from the second writing's second on, each predicted from the position before it
        _, targets = _padded([sample], pad_id=0)
        learnt = [int(t) for t in targets[0] if t != -100]
        assert learnt == sample.token_ids[n + 2 :].tolist()
    assert len(lengths) > 1


def test_a_sample_is_fixed_by_seed_and_index_alone():
    a, b = CopyRuns(np.arange(5, 50), 1, seed=1), CopyRuns(np.arange(5, 50), 1, seed=1)
    np.testing.assert_array_equal(a[77].token_ids, b[77].token_ids)
    assert not np.array_equal(a[77].token_ids[:8], a[78].token_ids[:8])
    assert not np.array_equal(a[77].token_ids[:8], CopyRuns(np.arange(5, 50), 1, seed=2)[77].token_ids[:8])
    with pytest.raises(IndexError):
        a[len(a)]
    with pytest.raises(ValueError, match="at least 2 distinct ids"):
        CopyRuns(np.array([4, 4, 4]), 1, seed=0)


def test_random_draws_from_the_pool_and_at_their_share():
    episodes, pool = list(range(10)), CopyRuns(np.arange(5, 60), 1, seed=0)
    assert _draws(random.Random(5), episodes, [(pool, 0.0)], 8) == random.Random(5).choices(episodes, k=8)
    drawn = _draws(random.Random(5), episodes, [([], 0.1), ([], 0.5), (pool, 0.2)], 3000)
    assert 0.17 < sum(isinstance(s, CopySample) for s in drawn) / 3000 < 0.23
    assert all(isinstance(s, CopySample) for s in _draws(random.Random(5), episodes, [(pool, 1.0)], 50))


def _batches_seen(monkeypatch, cfg: WarmupConfig, share: float) -> list[list[type]]:
    """The kinds of sample in each step's batch of a warm-up with copying practice."""
    seen: list[list[type]] = []
    padded = supervised._padded

    def spy(samples, pad_id):
        if not seen or len(seen[-1]) >= cfg.batch_size:
            seen.append([])
        seen[-1].extend(type(s) for s in samples)
        return padded(samples, pad_id)

    monkeypatch.setattr(supervised, "_padded", spy)
    model, _ = load_model("tiny:main")
    episodes = _episodes(model.config.vocab_size)
    pool = CopyRuns(np.concatenate([e.token_ids for e in episodes]), 1, seed=0)
    warm_up_trajectories(model, episodes, cfg, copies=pool, copy_share=share)
    return seen


def test_the_first_copy_steps_practise_copying_alone_then_the_episodes_come(monkeypatch):
    cfg = WarmupConfig(steps=5, batch_size=8, lr=1e-2, micro_batch=4, copy_steps=2)
    seen = _batches_seen(monkeypatch, cfg, share=0.0)
    assert len(seen) == 5
    assert seen[0] == seen[1] == [CopySample] * 8
    assert all(CopySample not in step for step in seen[2:])  # no share: episodes only after the practice


def test_after_the_practice_a_share_keeps_copies_in_the_batches(monkeypatch):
    cfg = WarmupConfig(steps=12, batch_size=8, lr=1e-2, micro_batch=8, copy_steps=1)
    seen = _batches_seen(monkeypatch, cfg, share=0.5)
    later = [kind for step in seen[1:] for kind in step]
    assert seen[0] == [CopySample] * 8
    assert 0.25 < later.count(CopySample) / len(later) < 0.75 and CopySample in later and len(set(later)) == 2


def test_copying_practice_needs_a_pool_and_steps_left_for_the_episodes():
    model, _ = load_model("tiny:main")
    with pytest.raises(ValueError, match="pass `copies`"):
        warm_up_trajectories(model, _episodes(500), WarmupConfig(steps=3, copy_steps=1))
    with pytest.raises(ValueError, match="copy_steps < steps"):
        WarmupConfig(steps=3, copy_steps=3)


def test_a_resumed_warm_up_with_copying_practice_ends_bit_for_bit_as_the_uninterrupted_one(tmp_path):
    cfg = WarmupConfig(steps=6, batch_size=4, lr=1e-2, seed=2, micro_batch=2, copy_steps=2, lr_ramp_steps=2)

    def train(checkpoint=None, stop_after=None):
        model, _ = load_model("tiny:main")
        episodes = _episodes(500)
        pool = CopyRuns(np.concatenate([e.token_ids for e in episodes]), 1, seed=2)

        def progress(step: int, loss: float) -> None:
            if stop_after is not None and step + 1 == stop_after:
                raise KeyboardInterrupt

        done = warm_up_trajectories(model, episodes, cfg, progress, copies=pool, copy_share=0.25, checkpoint=checkpoint)
        return model, done

    whole, uninterrupted = train()
    saved = tmp_path / "main.checkpoint.pt"
    with pytest.raises(KeyboardInterrupt):  # stopped inside the copying practice
        train(TrainingCheckpoint(saved, every_seconds=1e-9), stop_after=1)
    resumed_model, resumed = train(TrainingCheckpoint(saved, every_seconds=1e-9))
    assert resumed.resumed_at == [1] and resumed.losses == uninterrupted.losses
    for (name, a), b in zip(whole.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name


class _Copier(torch.nn.Module):
    """A model that copies by construction: from the run's second writing on, the id one run back (a copying sample
    is the start id and a run of n ids written four times), else id 0."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
        ids = input_ids[0].tolist()
        n = (len(ids) - 1) // WRITINGS
        logits = torch.zeros(1, len(ids), self.vocab)
        for t in range(len(ids)):  # the output at t predicts id t + 1, which repeats id t + 1 - n
            logits[0, t, ids[t + 1 - n] if t + 1 - n >= 1 else 0] = 1.0
        return SimpleNamespace(logits=logits)


def test_copied_share_is_one_for_a_model_that_copies_and_about_zero_for_one_that_does_not():
    pool = CopyRuns(np.arange(10, 800), start_id=1, seed=0, held_out=True)
    assert copied_share(_Copier(800), pool, count=32) == 1.0
    untrained, _ = load_model("tiny:main")
    untrained.train()
    assert copied_share(untrained, pool, count=16) < 0.05
    assert untrained.training  # measured in eval mode, then left as it was


def test_the_held_out_pool_is_other_samples_than_the_practice_s():
    practice, held_out = CopyRuns(np.arange(5, 500), 1, seed=4), CopyRuns(np.arange(5, 500), 1, seed=4, held_out=True)
    assert all(not np.array_equal(practice[i].token_ids, held_out[i].token_ids) for i in range(20))


def test_the_lr_decay_spans_the_steps_after_the_copying_practice():
    cfg = WarmupConfig(steps=10, lr=1.0, lr_ramp_steps=2, lr_decay=True, copy_steps=4)
    # ramp (s + 1) / 2, then the full lr through the practice, then 1 - 0.9 * (s - 4) / 5 down to 0.1 at the last step
    expected = [0.5, 1.0, 1.0, 1.0, 1.0, 0.82, 0.64, 0.46, 0.28, 0.1]
    assert [round(cfg.lr_factor(s), 6) for s in range(10)] == expected
    no_practice = WarmupConfig(steps=10, lr=1.0, lr_ramp_steps=2, lr_decay=True)
    assert [round(no_practice.lr_factor(s), 6) for s in range(3)] == [0.5, 1.0, 1.0]
    assert round(no_practice.lr_factor(9), 6) == 0.1 and round(no_practice.lr_factor(5), 6) == round(1 - 0.9 * 3 / 7, 6)


def test_the_web_warm_up_counts_and_says_the_practice_steps():
    cfg = WebWarmupConfig(steps=600, sub_steps=250, copy_steps=100, copies=0.1, worlds=2, pages=0.1, final_turns=0.5)
    assert cfg.steps_of("main") == 700 and cfg.steps_of("sub") == 350
    assert cfg.steps_said() == "600 steps (S 250) after 100 of copying"
    assert cfg.steps_said(with_sub=False) == "600 steps after 100 of copying"
    assert "copying practice for 10% of the samples" in cfg.learns_from()
    assert WebWarmupConfig(steps=8).steps_said() == "8 steps" and WebWarmupConfig(steps=8).steps_of("sub") == 8
    with pytest.raises(ValueError, match="pages \\+ final_turns \\+ copies < 1"):
        WebWarmupConfig(steps=8, worlds=2, pages=0.1, final_turns=0.5, copies=0.4)
    with pytest.raises(ValueError, match="copy_steps must be >= 0"):
        WebWarmupConfig(steps=8, copy_steps=-1)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        WebWarmupConfig(steps=8, seed=-1)
    with pytest.raises(TypeError, match="endless pool"):
        list(CopyRuns(np.arange(5, 9), 1, seed=0))


def test_mgrpo_warmup_says_each_agent_s_copied_share_where_its_record_has_one(tmp_path):
    from mgrpo_actors.cli.warmup import _copied_shares

    record = tmp_path / "warmup.json"
    record.write_text(json.dumps({"agents": {"main": {"copied_share": 0.934}, "sub": {"copied_share": 0.5}}}))
    assert _copied_shares(record) == "main 93%, sub 50%"
    record.write_text(json.dumps({"agents": {"main": {"losses": [1.0]}}}))  # built before it was measured
    assert _copied_shares(record) == "" and _copied_shares(tmp_path / "none.json") == ""


def test_the_web_warm_up_practises_copying_first_and_records_what_each_agent_copies(tmp_path, monkeypatch):
    """warm_up_agents (warmup/web.py) with copy_steps and copies: every sample of the first step a copying sample
    opened by the id the agent's episodes open with, later steps mixed, and copied_share in warmup.json."""
    from mgrpo_actors.config import NodeConfig, load_config
    from mgrpo_actors.warmup.web import warm_up_agents

    seen: list[list] = []
    padded = supervised._padded

    def spy(samples, pad_id):
        seen.append(list(samples))
        return padded(samples, pad_id)

    monkeypatch.setattr(supervised, "_padded", spy)
    config = load_config(
        NodeConfig, None, ["agents.main.model=tiny:main", "agents.sub.model=tiny:sub", "tools.web_entities=300"]
    )
    cfg = WebWarmupConfig(steps=3, questions=6, batch_size=4, micro_batch=4, copy_steps=1, copies=0.25)
    warm_up_agents(config, cfg, tmp_path)
    record = json.loads((tmp_path / "warmup.json").read_text())
    assert record["settings"]["copy_steps"] == 1 and record["settings"]["copies"] == 0.25
    for side in ("main", "sub"):
        assert len(record["agents"][side]["losses"]) == 4  # 1 of practice, then 3 on the episodes
        assert 0 <= record["agents"][side]["copied_share"] <= 1
    main_first, sub_first = seen[0], seen[4]  # a pass of 4 per step: main's 4 steps, then sub's
    for first in (main_first, sub_first):
        assert all(isinstance(s, CopySample) for s in first)
        assert len({int(s.token_ids[0]) for s in first}) == 1  # the one id the agent's episodes open with
    assert all(not isinstance(s, CopySample) or len(s.token_ids) < 70 for step in seen[1:4] for s in step)
