"""The rollout benchmark's quick run: both sides generate the same tokens, figures are consistent."""

from mgrpo_actors.bench import rollout


def test_quick_rollout_bench_compares_like_with_like():
    result = rollout.run(quick=True)
    assert result["model"] == "tiny:main"
    # Same prompts, sampling and seeds: the engine samples exactly what plain generate samples.
    assert result["engine_tokens"] == result["generate_tokens"] > 0
    assert result["engine_tokens_per_s"] > 0 and result["generate_tokens_per_s"] > 0
    assert result["ratio"] > 0 and result["target_ratio"] == rollout.TARGET_RATIO
