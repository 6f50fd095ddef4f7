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
    subtask_text,
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


def test_contains_reference_pays_nothing_for_what_s_was_given():
    # docs/method.md §Rewards: a local rule judges S only on what it found itself.
    task = "Where was Orlen Vasque born?"
    failed = "I could not find where Orlen Vasque was born."
    assert contains_reference(failed, ["Orlen Vasque", "Castor Bay"], given=task) == 0.0
    assert contains_reference(failed, ["Orlen Vasque", "Castor Bay"]) == 1.0  # what the old rule paid
    found = "Orlen Vasque was born in Castor Bay."
    assert contains_reference(found, ["Orlen Vasque", "Castor Bay"], given=task) == 1.0
    # Whole words, after normalising: "Castor Bayside" in the task does not give away "Castor Bay".
    assert contains_reference(found, "castor bay", given="Is it Castor Bayside?") == 1.0
    # The context counts as given too.
    given = subtask_text("Where was the founder born?", "The founder is Orlen Vasque.")
    assert given == "Where was the founder born?\n\nThe founder is Orlen Vasque."
    assert contains_reference(failed, "Orlen Vasque", given=given) == 0.0
    assert subtask_text("Where?", "") == "Where?"


def test_contains_reference_judge_reads_the_question_as_what_s_was_told():
    judge = ContainsReferenceJudge()
    task = "Where was Orlen Vasque born?"
    assert judge.score(task, "I could not find where Orlen Vasque was born.", "Orlen Vasque").score == 0.0
    assert judge.score(task, "Orlen Vasque was born in Castor Bay.", "Castor Bay").score == 1.0


def test_no_references_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        exact_match("x", [])


@pytest.mark.parametrize("judge", [ExactMatchJudge(), TokenF1Judge(), ContainsReferenceJudge()])
def test_rule_judges_follow_the_judge_protocol(judge):
    assert isinstance(judge, Judge)
    verdict = judge.score("Where?", "Castor Bay", "Castor Bay")
    assert verdict.score == 1.0 and not verdict.used_fallback and verdict.judge == judge.name
