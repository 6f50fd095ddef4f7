"""`learners.<side>.torch_threads`: 0 = every core the process may use (its CPU affinity), shared out among
a launcher's local ranks; a learner computes with that many torch threads while it applies a batch."""

from __future__ import annotations

import pytest

from mgrpo_actors.config.learner import LearnerConfig


def test_zero_means_the_cores_of_the_process_affinity(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 5}, raising=False)
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert LearnerConfig().torch_threads == 0 and LearnerConfig().threads() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two ranks of torchrun on this host share them
    assert LearnerConfig().threads() == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert LearnerConfig().threads() == 1
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    monkeypatch.setenv("LOCAL_SIZE", "4")  # the deepspeed launcher's name for it
    assert LearnerConfig().threads() == 1
    monkeypatch.delenv("LOCAL_SIZE")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert LearnerConfig().threads() == 4  # the ranks may be on other hosts
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert LearnerConfig().threads() == 2  # a group on the loopback: every rank is on this host


def test_a_set_count_is_used_as_it_is(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert LearnerConfig(torch_threads=3).threads() == 3


@pytest.mark.parametrize("field", ["torch_threads", "logprob_chunk_tokens"])
def test_negative_values_are_refused(field):
    with pytest.raises(ValueError, match=field):
        LearnerConfig(**{field: -1})


def test_the_trainer_computes_with_the_learners_threads_and_restores_them():
    import torch

    from mgrpo_actors.learner.threads import torch_threads

    before = torch.get_num_threads()
    with torch_threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before


def test_the_learners_of_one_process_share_its_cores(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert LearnerConfig().threads(applying_here=1) == 4  # alone: every core
    assert LearnerConfig().threads(applying_here=2) == 2  # --role all: main and sub learner step at once
    assert LearnerConfig().threads(applying_here=8) == 1
    assert LearnerConfig(torch_threads=3).threads(applying_here=2) == 3  # a set count is the user's


def test_trainers_applying_at_once_are_counted_and_uncounted():
    from mgrpo_actors.learner.threads import applying_here

    with applying_here() as first:
        with applying_here() as second:
            assert (first, second) == (1, 2)
        with applying_here() as again:
            assert again == 2
    with applying_here() as alone:
        assert alone == 1


def test_a_learner_takes_its_share_of_the_cores_anew_at_every_micro_batch(monkeypatch):
    import torch

    from mgrpo_actors.learner.threads import applying_here, rebalance_threads, torch_threads

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    with applying_here(), torch_threads(4):  # the main learner, alone when it started: every core
        assert rebalance_threads(LearnerConfig()) == 4 and torch.get_num_threads() == 4
        with applying_here():  # the sub learner starts beside it: the main one gives up half
            assert rebalance_threads(LearnerConfig()) == 2 and torch.get_num_threads() == 2
        # the sub learner is done: the main one takes every core again at its next micro-batch
        assert rebalance_threads(LearnerConfig()) == 4 and torch.get_num_threads() == 4
        assert rebalance_threads(LearnerConfig(torch_threads=3)) == 3  # a set count stays the user's
    assert torch.get_num_threads() == before


def test_threads_a_rebalance_changed_are_restored_even_when_the_entry_changed_nothing():
    import torch

    from mgrpo_actors.learner.threads import torch_threads

    before = torch.get_num_threads()
    with torch_threads(before):  # the learner's share was what the thread had already
        torch.set_num_threads(before + 1)  # a rebalance inside (the other learner finished)
    assert torch.get_num_threads() == before
