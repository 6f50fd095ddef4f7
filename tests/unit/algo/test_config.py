"""Config defaults cite their sources; bad values are a ValueError naming the field."""

import pytest

from mgrpo_actors.algo.config import (
    AdvantageConfig,
    AlgoConfig,
    AlignmentConfig,
    JudgeConfig,
    ObjectiveConfig,
    RewardConfig,
)


def test_defaults_are_the_paper_and_reference_code_values():
    rewards = RewardConfig()
    assert (rewards.alpha_format, rewards.alpha_correct) == (0.1, 0.9)
    assert (rewards.beta_format, rewards.beta_correct, rewards.beta_expert) == (0.1, 0.4, 0.5)
    assert (AdvantageConfig().std, AdvantageConfig().eps) == ("population", 1e-6)
    assert (AlignmentConfig().d, AlignmentConfig().mode, AlignmentConfig().quantile) == (8, "duplicate", 0.99)
    objective = ObjectiveConfig()
    assert (objective.eps_low, objective.eps_high, objective.ratio) == (0.2, 0.28, "token")
    assert (objective.aggregation, objective.kl_coef) == ("token-mean", 0.0)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: RewardConfig(alpha_format=-0.1), "alpha_format"),
        (lambda: RewardConfig(beta_expert=float("nan")), "beta_expert"),
        (lambda: RewardConfig(alpha_format=0, alpha_correct=0), "alpha_format + alpha_correct"),
        (lambda: AdvantageConfig(std="sample"), "advantages.std"),
        (lambda: AdvantageConfig(eps=-1.0), "advantages.eps"),
        (lambda: AlignmentConfig(d=0), "alignment.d"),
        (lambda: AlignmentConfig(d="automatic"), "alignment.d"),
        (lambda: AlignmentConfig(d=True), "alignment.d"),
        (lambda: AlignmentConfig(mode="pad"), "alignment.mode"),
        (lambda: AlignmentConfig(quantile=0.0), "alignment.quantile"),
        (lambda: AlignmentConfig(window=0), "alignment.window"),
        (lambda: AlignmentConfig(d_min=5, d_max=4), "alignment.d_min"),
        (lambda: AlignmentConfig(d_initial=100), "alignment.d_initial"),
        (lambda: ObjectiveConfig(eps_low=1.0), "objective.eps_low"),
        (lambda: ObjectiveConfig(eps_high=0.0), "objective.eps_high"),
        (lambda: ObjectiveConfig(ratio="seq"), "objective.ratio"),
        (lambda: ObjectiveConfig(ratio="sequence"), "objective.ratio: sequence requires objective.aggregation"),
        (lambda: ObjectiveConfig(aggregation="mean"), "objective.aggregation"),
        (lambda: ObjectiveConfig(aggregation="seq-mean-token-sum-norm"), "objective.max_response_tokens"),
        (lambda: ObjectiveConfig(kl_coef=-1.0), "objective.kl_coef"),
        (lambda: ObjectiveConfig(kl_estimator="k4"), "objective.kl_estimator"),
        (lambda: ObjectiveConfig(log_ratio_clamp=0.0), "objective.log_ratio_clamp"),
        (lambda: JudgeConfig(base_url="localhost:8000", model="m"), "judge.base_url"),
        (lambda: JudgeConfig(base_url="http://h", model=""), "judge.model"),
        (lambda: JudgeConfig(base_url="http://h", model="m", timeout_s=0), "judge.timeout_s"),
        (lambda: JudgeConfig(base_url="http://h", model="m", fallback_score=2.0), "judge.fallback_score"),
    ],
)
def test_bad_values_name_the_field(build, field):
    with pytest.raises(ValueError, match=field.replace("+", r"\+")):
        build()


def test_from_dict_builds_sections_and_rejects_unknown_names():
    objective = {"ratio": "sequence", "aggregation": "seq-mean-token-mean"}
    cfg = AlgoConfig.from_dict({"alignment": {"d": "auto"}, "objective": objective})
    assert cfg.alignment.d == "auto" and cfg.objective.ratio == "sequence"
    assert cfg.rewards == RewardConfig()
    with pytest.raises(ValueError, match="unknown section"):
        AlgoConfig.from_dict({"reward": {}})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['epsilon'\] in section 'objective'"):
        AlgoConfig.from_dict({"objective": {"epsilon": 0.2}})


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum-norm"])
def test_sequence_ratio_needs_seq_mean_token_mean_and_names_both_keys(aggregation):
    # docs/method.md §Objective: the paper's sequence ratio counts each sequence's loss once.
    with pytest.raises(ValueError, match=rf"objective\.ratio.*objective\.aggregation: {aggregation}"):
        ObjectiveConfig(ratio="sequence", aggregation=aggregation, max_response_tokens=16)
    assert ObjectiveConfig(ratio="sequence", aggregation="seq-mean-token-mean").ratio == "sequence"


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_sequence_mean_ratio_takes_any_aggregation(aggregation):
    cfg = ObjectiveConfig(ratio="sequence-mean", aggregation=aggregation, max_response_tokens=16)
    assert (cfg.ratio, cfg.aggregation) == ("sequence-mean", aggregation)
