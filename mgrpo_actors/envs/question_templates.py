"""The wording of the synthetic web's questions: templates per attribute and relation, superlatives
for compare/compose questions and counting phrases for aggregates (used by questions.py)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ATTRIBUTE_QUESTIONS",
    "COUNT_DIFFERENCES",
    "COUNT_EQUAL",
    "COUNT_LESS",
    "NUMBER_WORDS",
    "RELATION_PHRASES",
    "RELATION_QUESTIONS",
    "SUPERLATIVES",
    "Superlative",
    "YEAR_DIFFERENCES",
]

# "{x}" is a name or a noun phrase; the question asks for one fact about it.
ATTRIBUTE_QUESTIONS = {
    "birth_year": "In which year was {x} born?",
    "occupation": "What is the occupation of {x}?",
    "founded_year": "In which year was {x} founded?",
    "industry": "In which industry does {x} operate?",
    "employees": "How many employees does {x} have?",
    "population": "What is the population of {x}?",
    "settled_year": "In which year was {x} settled?",
    "country_population": "What is the population of {x}?",
    "currency": "What is the currency of {x}?",
    "release_year": "In which year was {x} first released?",
    "category": "What kind of product is {x}?",
    "year": "In which year was {x} held?",
    "discipline": "In which discipline is {x} contested?",
}
RELATION_QUESTIONS = {
    "born_in": "In which city was {x} born?",
    "works_for": "Which organisation employs {x}?",
    "founded_by": "Who founded {x}?",
    "headquartered_in": "In which city is {x} headquartered?",
    "in_country": "In which country is {x}?",
    "capital": "What is the capital of {x}?",
    "mayor": "Who is the mayor of {x}?",
    "made_by": "Which organisation makes {x}?",
    "designed_by": "Who designed {x}?",
    "held_in": "In which city was {x} held?",
    "organised_by": "Which organisation organised {x}?",
    "winner": "Who won {x}?",
}
# The entity a relation leads to, as a noun phrase about its source "{x}".
RELATION_PHRASES = {
    "born_in": "the birthplace of {x}",
    "works_for": "the employer of {x}",
    "founded_by": "the founder of {x}",
    "headquartered_in": "the city where {x} is headquartered",
    "in_country": "the country {x} lies in",
    "capital": "the capital of {x}",
    "mayor": "the mayor of {x}",
    "made_by": "the maker of {x}",
    "designed_by": "the designer of {x}",
    "held_in": "the city that hosted {x}",
    "organised_by": "the organiser of {x}",
    "winner": "the winner of {x}",
}


@dataclass(frozen=True)
class Superlative:
    """A compare/compose template: which entity has the smallest or largest value of a numeric fact."""

    attribute: str
    operation: str  # argmin | argmax
    among: str  # "Which of {names} ..." (compare)
    between: str  # "Which ...: {a} or {b}?" (compose)


SUPERLATIVES = (
    Superlative("birth_year", "argmin", "Which of {names} was born first?", "Who was born first: {a} or {b}?"),
    Superlative("birth_year", "argmax", "Which of {names} was born last?", "Who was born last: {a} or {b}?"),
    Superlative(
        "founded_year", "argmin", "Which of {names} was founded first?", "Which was founded first: {a} or {b}?"
    ),
    Superlative(
        "founded_year",
        "argmax",
        "Which of {names} was founded most recently?",
        "Which was founded more recently: {a} or {b}?",
    ),
    Superlative(
        "employees", "argmax", "Which of {names} has the most employees?", "Which has more employees: {a} or {b}?"
    ),
    Superlative(
        "population",
        "argmax",
        "Which of {names} has the largest population?",
        "Which has the larger population: {a} or {b}?",
    ),
    Superlative(
        "population",
        "argmin",
        "Which of {names} has the smallest population?",
        "Which has the smaller population: {a} or {b}?",
    ),
    Superlative(
        "settled_year", "argmin", "Which of {names} was settled first?", "Which was settled first: {a} or {b}?"
    ),
    Superlative(
        "country_population",
        "argmax",
        "Which of {names} has the largest population?",
        "Which has the larger population: {a} or {b}?",
    ),
    Superlative(
        "release_year", "argmin", "Which of {names} was released first?", "Which was released first: {a} or {b}?"
    ),
    Superlative(
        "year", "argmax", "Which of {names} was held most recently?", "Which was held more recently: {a} or {b}?"
    ),
)

# Aggregates: relation -> "How many of {names} ... {target}?"; attribute -> "... before {year}?"
COUNT_EQUAL = {
    "born_in": "How many of {names} were born in {target}?",
    "works_for": "How many of {names} work for {target}?",
    "headquartered_in": "How many of {names} are headquartered in {target}?",
    "in_country": "How many of {names} lie in {target}?",
    "made_by": "How many of {names} are made by {target}?",
    "held_in": "How many of {names} were held in {target}?",
}
COUNT_LESS = {
    "birth_year": "How many of {names} were born before {target}?",
    "founded_year": "How many of {names} were founded before {target}?",
    "release_year": "How many of {names} were first released before {target}?",
    "year": "How many of {names} were held before {target}?",
}
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")

# Differences (two facts, then a subtraction): a year attribute -> (the clause naming the event for "{x}", its
# participle), asked as "How many years after <clause of the earlier> was <later> <participle>?"; a count
# attribute -> "How many more ... does {a} have than {b}?" with {a} the larger.
YEAR_DIFFERENCES = {
    "birth_year": ("{x} was born", "born"),
    "founded_year": ("{x} was founded", "founded"),
    "settled_year": ("{x} was settled", "settled"),
    "release_year": ("{x} was first released", "first released"),
    "year": ("{x} was held", "held"),
}
COUNT_DIFFERENCES = {
    "employees": "How many more employees does {a} have than {b}?",
    "population": "How many more people live in {a} than in {b}?",
    "country_population": "How many more people live in {a} than in {b}?",
}
