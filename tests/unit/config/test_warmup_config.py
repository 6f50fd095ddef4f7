"""The warmup section: what a warm-up learns from, said in words by `mgrpo warmup` and `mgrpo run`, and its checks."""

from __future__ import annotations

import pytest

from mgrpo_actors.config.warmup import WebWarmupConfig


def test_what_the_warm_up_learns_from_names_only_what_is_on():
    assert WebWarmupConfig(questions=16).learns_from() == "oracle episodes of up to 16 train questions (lookup)"
    pretraining = WebWarmupConfig(questions=2000, kinds=["lookup", "compare"], worlds=8, all_tokens=True, pages=0.2)
    assert pretraining.learns_from() == (
        "oracle episodes of up to 2000 train questions (lookup, compare) of each of 8 worlds, every token of the other "
        "worlds', the other worlds' pages for 20% of the samples"
    )
    drills = WebWarmupConfig(questions=16, worlds=2, pages=0.1, final_turns=0.5)
    assert drills.learns_from() == (
        "oracle episodes of up to 16 train questions (lookup) of each of 2 worlds, the other worlds' pages for 10% of "
        "the samples, the other worlds' episodes learnt on their last turn alone for 50% of the samples"
    )


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"worlds": 0}, "warmup.worlds must be >= 1"),
        ({"pages": 1.0, "worlds": 2}, "0 <= pages < 1"),
        ({"pages": -0.1, "worlds": 2}, "0 <= pages < 1"),
        ({"pages": 0.2}, "warmup.pages are the other worlds' pages .* set warmup.worlds >= 2"),
        ({"final_turns": 0.5}, "warmup.final_turns are the other worlds' episodes: set warmup.worlds >= 2"),
        ({"final_turns": 1.0, "worlds": 2}, "0 <= final_turns < 1"),
        ({"final_turns": -0.1, "worlds": 2}, "0 <= final_turns < 1"),
        ({"final_turns": 0.6, "pages": 0.4, "worlds": 2}, "pages \\+ final_turns \\+ copies < 1"),
        ({"micro_batch": 0}, "micro_batch >= 1"),
        ({"lr_ramp_steps": -1}, "lr_ramp_steps >= 0"),
    ],
)
def test_bad_settings_are_refused_naming_them(bad, message):
    with pytest.raises(ValueError, match=message):
        WebWarmupConfig(**bad)
