"""The continuous-batching benchmark (`mgrpo bench continuous`): its quick run reports the three sides per dtype with
ratios against `cut` from paired jobs, `cut` and `stopped` keep the very same tokens (same seeds: stopping at the
action block only spares the tail), and per-episode figures stay within make-run's sub-agent budgets."""

from mgrpo_actors.bench import continuous


def test_quick_continuous_bench_reports_consistent_figures():
    result = continuous.run(quick=True)
    assert result["rows"] and result["rows"][0]["dtype"] == "fp32"
    for row in result["rows"]:
        assert row["cut"]["time_ratio"] == row["cut"]["rate_ratio"] == 1.0
        assert row["cut"]["kept_per_episode"] == row["stopped"]["kept_per_episode"]
        for side in continuous.SIDES:
            figures = row[side]
            assert figures["seconds"] > 0 and figures["kept_tokens_per_s"] > 0
            assert 1 <= figures["turns_per_episode"] <= result["max_turns"]
            assert 0 < figures["kept_per_episode"] <= figures["sampled_per_episode"]
            assert figures["sampled_per_episode"] <= result["max_turns"] * result["turn_tokens"]
