"""The narrowing benchmark (`mgrpo bench narrowing`): its quick run reports both sides per dtype, their ratio from
the medians, and counts rows alike only when every token matches."""

from mgrpo_actors.bench import narrowing


def test_quick_narrowing_bench_reports_consistent_figures():
    result = narrowing.run(quick=True)
    assert result["rows"] and result["rows"][0]["dtype"] == "fp32"
    for row in result["rows"]:
        assert row["narrowed_tokens_per_s"] > 0 and row["whole_tokens_per_s"] > 0
        assert abs(row["ratio"] - row["narrowed_tokens_per_s"] / row["whole_tokens_per_s"]) < 1e-9
        assert 0 <= row["same_rows"] <= row["rows"] == narrowing.QUICK.batch * narrowing.QUICK.repeats
        assert 1 <= row["row_length_median"] <= row["row_length_max"] <= narrowing.QUICK.max_new_tokens
