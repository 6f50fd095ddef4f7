"""Rule scorers for r_correct and r_expert, docs/method.md §Rewards.

Normalised exact match and token F1 (as in SQuAD/HotpotQA evaluation) for M's answer against the gold
answer, numeric match for math answers (plain GRPO), and "does the text contain a reference S was not
already given" for S's result against the evidence entities. Each takes one reference or a sequence of
accepted aliases and returns the best score over them. The `*Judge` classes wrap them in the Judge
protocol (judge.py) so rule and LLM judges are interchangeable.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction

from mgrpo_actors.algo.judge import Verdict

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)

References = str | Sequence[str]


def normalize_answer(text: str) -> str:
    """Lower case, NFKC, no punctuation, no articles (a/an/the), single spaces."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = text.translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_list(references: References) -> list[str]:
    refs = [references] if isinstance(references, str) else list(references)
    if not refs:
        raise ValueError("references must name at least one accepted answer")
    return refs


def exact_match(prediction: str, references: References) -> float:
    """1.0 when the normalised prediction equals a normalised reference, else 0.0."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(ref) for ref in _as_list(references)))


# A plain decimal number: optional sign, digits with an optional fraction, optional exponent.
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_GROUPED = re.compile(r"[-+]?\d{1,3}(,\d{3})+(\.\d*)?")  # 1,000 or 12,345.5: commas only between groups of three


def parse_number(text: str) -> Fraction | None:
    """The number `text` writes, exactly (a Unicode minus and thousands commas between groups of three
    allowed; nothing inside it but the number), or None. Exact, so 1000001 is not 1000000 and 1e400 is
    not 1e500, as floats within a tolerance would have it."""
    cleaned = unicodedata.normalize("NFKC", text).replace("\u2212", "-").strip()
    if _GROUPED.fullmatch(cleaned):
        cleaned = cleaned.replace(",", "")
    return Fraction(Decimal(cleaned)) if _NUMBER.fullmatch(cleaned) else None


def numeric_match(prediction: str, references: References) -> float:
    """1.0 when the prediction and a reference write the same number exactly ("4", "4.0", "+4" and
    "4e0" agree; "-4", "4.000001" and "4 0" do not), else exact_match for a reference that is not a number.

    normalize_answer drops punctuation, so exact match would equate "-4" with "4" and "1.5" with "15":
    math answers need this instead.
    """
    predicted = parse_number(prediction)
    for ref in _as_list(references):
        expected = parse_number(ref)
        if expected is None:
            if exact_match(prediction, ref):
                return 1.0
        elif predicted is not None and predicted == expected:
            return 1.0
    return 0.0


def _f1(prediction_tokens: list[str], reference_tokens: list[str]) -> float:
    if not prediction_tokens or not reference_tokens:
        # Two empty answers agree; one empty answer shares nothing with the other.
        return float(prediction_tokens == reference_tokens)
    common = sum((Counter(prediction_tokens) & Counter(reference_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(prediction_tokens)
    recall = common / len(reference_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, references: References) -> float:
    """Best bag-of-tokens F1 between the normalised prediction and a normalised reference."""
    predicted = normalize_answer(prediction).split()
    return max(_f1(predicted, normalize_answer(ref).split()) for ref in _as_list(references))


def _occurs(wanted: str, padded_text: str) -> bool:
    """Whether the normalised `wanted` occurs as whole words in a normalised text padded with spaces."""
    return bool(wanted) and f" {wanted} " in padded_text


def contains_reference(text: str, references: References, given: str = "") -> float:
    """1.0 when a normalised reference occurs in the normalised text as whole words, else 0.0.

    The local rule for r_expert (docs/method.md §Rewards [ours]): did S's result contain the evidence entity.
    A reference that already occurs (as whole words) in `given`, what S was told (its task and context),
    earns nothing: S is judged only on what it found itself, so echoing its task never scores.
    """
    padded = f" {normalize_answer(text)} "
    told = f" {normalize_answer(given)} "
    for ref in _as_list(references):
        wanted = normalize_answer(ref)
        if _occurs(wanted, padded) and not _occurs(wanted, told):
            return 1.0
    return 0.0


def subtask_text(task: str, context: str) -> str:
    """What S was told, as the `question` its expert judge reads: the task, then the context if any.

    docs/method.md §Rewards: a local rule judges S only on what S found beyond this text.
    """
    return "\n\n".join(part for part in (task, context) if part)


class ExactMatchJudge:
    """The Judge protocol over exact_match."""

    name = "exact-match"

    def score(self, question: str, response: str, reference: str) -> Verdict:
        return Verdict(score=exact_match(response, reference), judge=self.name)


class NumericMatchJudge:
    """The Judge protocol over numeric_match (math answers: plain GRPO on arithmetic, GSM8K-style JSONL)."""

    name = "numeric-match"

    def score(self, question: str, response: str, reference: str) -> Verdict:
        return Verdict(score=numeric_match(response, reference), judge=self.name)


class TokenF1Judge:
    """The Judge protocol over token_f1."""

    name = "token-f1"

    def score(self, question: str, response: str, reference: str) -> Verdict:
        return Verdict(score=token_f1(response, reference), judge=self.name)


class ContainsReferenceJudge:
    """The Judge protocol over contains_reference (the local r_expert rule).

    `question` is what S was told (`subtask_text(task, context)`): a reference it already contains
    scores 0 whatever the response says (docs/method.md §Rewards).
    """

    name = "contains-reference"

    def score(self, question: str, response: str, reference: str) -> Verdict:
        return Verdict(score=contains_reference(response, reference, given=question), judge=self.name)
