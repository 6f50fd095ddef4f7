"""Invented names built from syllables, so no model can answer a question about them from memory.

`NameGenerator` draws every root word from one seeded `random.Random` and never hands out the same
root twice (family names excepted: people share surnames, as real people do), so every entity name
and its url slug are unique within a world.
"""

from __future__ import annotations

import random
import re

__all__ = ["NameGenerator", "slugify"]

_ONSETS = (
    "b",
    "br",
    "c",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "j",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "pr",
    "qu",
    "r",
    "s",
    "sk",
    "st",
    "t",
    "th",
    "tr",
    "v",
    "vr",
    "z",
    "zh",
)
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou")
_CODAS = ("", "", "", "", "n", "r", "l", "s", "m", "th", "x")
_ORG_SUFFIXES = (
    "Dynamics",
    "Labs",
    "Works",
    "Institute",
    "Collective",
    "Systems",
    "Foundry",
    "Guild",
    "Holdings",
    "Studios",
    "Analytics",
    "Cooperative",
)
_CITY_ENDINGS = ("", "", "ton", "holm", "vale", "burg", "mouth", "ford", "stad", "port")
_COUNTRY_ENDINGS = ("ia", "land", "stan", "mark", "ora", "ene")
_PRODUCT_MODELS = ("", "2", "3", "9", "X", "Pro", "Mini", "One", "Max", "Lite", "S")
_EVENT_KINDS = ("Open", "Cup", "Games", "Summit", "Festival", "Championship", "Classic", "Trophy")
_CURRENCY_ENDINGS = ("crown", "mark", "dral", "sol", "pence")


def slugify(name: str) -> str:
    """Lower-case `name` and join its letter/digit runs with '-': the page slug of an entity."""
    return "-".join(re.findall(r"[a-z0-9]+", name.lower()))


class NameGenerator:
    """Hands out unique invented names for every entity type of the synthetic world."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used_roots: set[str] = set()
        self._used_names: set[str] = set()
        self._surnames: list[str] = []

    def _syllable(self) -> str:
        return self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) + self._rng.choice(_CODAS)

    def _word(self, min_syllables: int = 2, max_syllables: int = 3) -> str:
        n = self._rng.randint(min_syllables, max_syllables)
        return "".join(self._syllable() for _ in range(n)).capitalize()

    def _root(self, min_syllables: int = 2, max_syllables: int = 3) -> str:
        # Roots are never reused across entities, so a search for one name finds one entity.
        for _ in range(1000):
            word = self._word(min_syllables, max_syllables)
            if word.lower() not in self._used_roots and 3 <= len(word) <= 10:
                self._used_roots.add(word.lower())
                return word
        raise RuntimeError("name space exhausted; ask for fewer entities")

    def _claim(self, make) -> str:
        for _ in range(1000):
            name = make()
            if name not in self._used_names and slugify(name) not in self._used_names:
                self._used_names.update((name, slugify(name)))
                return name
        raise RuntimeError("name space exhausted; ask for fewer entities")

    def person(self) -> str:
        """A given name and a family name; about one family name in three is shared."""

        def make() -> str:
            if self._surnames and self._rng.random() < 0.35:
                surname = self._rng.choice(self._surnames)
            else:
                surname = self._root()
                self._surnames.append(surname)
            return f"{self._root(1, 2)} {surname}"

        return self._claim(make)

    def organisation(self) -> str:
        return self._claim(lambda: f"{self._root()} {self._rng.choice(_ORG_SUFFIXES)}")

    def city(self) -> str:
        return self._claim(lambda: self._root(2, 2) + self._rng.choice(_CITY_ENDINGS))

    def country(self) -> str:
        return self._claim(lambda: self._root(1, 2) + self._rng.choice(_COUNTRY_ENDINGS))

    def product(self) -> str:
        return self._claim(lambda: f"{self._root()} {self._rng.choice(_PRODUCT_MODELS)}".strip())

    def event(self) -> str:
        return self._claim(lambda: f"{self._root()} {self._rng.choice(_EVENT_KINDS)}")

    def currency(self) -> str:
        return self._claim(lambda: (self._root(1, 1) + self._rng.choice(_CURRENCY_ENDINGS)).lower())
