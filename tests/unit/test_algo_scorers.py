"""Rule scorers: normalised exact match, token F1, contains-reference."""

import pytest

from mgrpo_actors.algo.judge import Judge
from mgrpo_actors.algo.scorers import (
    ContainsReferenceJudge,
    ExactMatchJudge,
    TokenF1Judge,
    contains_reference,
    exact_match,
    normalize_answer,
    token_f1,
)


def test_normalize_answer():
    assert normalize_answer("  The Castor-Bay!  ") == "castorbay"
    assert normalize_answer("An apple, a pear") == "apple pear"
    assert normalize_answer("ＣＡＳＴＯＲ") == "castor"  # NFKC folds full-width letters


def test_exact_match_normalises_and_accepts_aliases():
    assert exact_match("castor bay.", "Castor Bay") == 1.0
    assert exact_match("Castor", "Castor Bay") == 0.0
    assert exact_match("CB", ["Castor Bay", "cb"]) == 1.0


def test_token_f1():
    assert token_f1("Castor Bay", "Castor Bay") == 1.0
    assert token_f1("Castor", "Castor Bay") == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert token_f1("Meridian", "Castor Bay") == 0.0
    assert token_f1("", "") == 1.0
    assert token_f1("", "Castor") == 0.0
    assert token_f1("bay", ["Castor Bay", "Bay"]) == 1.0


def test_contains_reference_matches_whole_words_only():
    assert contains_reference("He was born in Castor Bay, in 1931.", "castor bay") == 1.0
    assert contains_reference("He was born in Castor Bayside.", "Castor Bay") == 0.0
    assert contains_reference("nothing here", ["Lyon", "nothing"]) == 1.0
    assert contains_reference("anything", "") == 0.0


def test_no_references_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        exact_match("x", [])


@pytest.mark.parametrize("judge", [ExactMatchJudge(), TokenF1Judge(), ContainsReferenceJudge()])
def test_rule_judges_follow_the_judge_protocol(judge):
    assert isinstance(judge, Judge)
    verdict = judge.score("Where?", "Castor Bay", "Castor Bay")
    assert verdict.score == 1.0 and not verdict.used_fallback and verdict.judge == judge.name
