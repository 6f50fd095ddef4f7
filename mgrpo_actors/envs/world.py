"""The fictional world behind the synthetic web: typed entities with attributes and relations.

Every relation is *functional* (an entity has at most one target per relation), so a question built by
following relations forward has exactly one answer. The world is a pure function of `WorldConfig`:
one `random.Random` seeded with the config's seed draws everything, and nothing iterates a set, so
the same seed gives the same world in every process (whatever PYTHONHASHSEED is).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property

import structlog

from mgrpo_actors.envs.names import NameGenerator, slugify

__all__ = [
    "ATTRIBUTES",
    "ENTITY_TYPES",
    "RELATIONS",
    "URL_PREFIX",
    "AttributeSpec",
    "Entity",
    "RelationSpec",
    "World",
    "WorldConfig",
    "format_value",
    "generate_world",
    "parse_number",
]

log = structlog.get_logger(__name__)

URL_PREFIX = "synth://wiki/"
ENTITY_TYPES = ("person", "organisation", "city", "country", "product", "event")


# Fewer entities cannot give every type enough members for the relations and questions.
MIN_ENTITIES = 60


@dataclass(frozen=True)
class AttributeSpec:
    """A typed value an entity of one type carries."""

    name: str  # key in Entity.attributes
    owner: str  # entity type that has it
    label: str  # how a page labels it
    numeric: bool  # comparable as a number (compare/aggregate questions)


@dataclass(frozen=True)
class RelationSpec:
    """A functional link from one entity to another."""

    name: str  # key in Entity.relations
    domain: str  # entity type of the source
    range: str  # entity type of the target
    label: str  # how the source page labels the target
    inverse_label: str  # how the target page lists the sources


ATTRIBUTES: dict[str, AttributeSpec] = {
    a.name: a
    for a in (
        AttributeSpec("birth_year", "person", "Born", True),
        AttributeSpec("occupation", "person", "Occupation", False),
        AttributeSpec("founded_year", "organisation", "Founded", True),
        AttributeSpec("industry", "organisation", "Industry", False),
        AttributeSpec("employees", "organisation", "Employees", True),
        AttributeSpec("population", "city", "Population", True),
        AttributeSpec("settled_year", "city", "Settled", True),
        AttributeSpec("country_population", "country", "Population", True),
        AttributeSpec("currency", "country", "Currency", False),
        AttributeSpec("release_year", "product", "Released", True),
        AttributeSpec("category", "product", "Category", False),
        AttributeSpec("year", "event", "Year", True),
        AttributeSpec("discipline", "event", "Discipline", False),
    )
}

RELATIONS: dict[str, RelationSpec] = {
    r.name: r
    for r in (
        RelationSpec("born_in", "person", "city", "Birthplace", "People born here"),
        RelationSpec("works_for", "person", "organisation", "Employer", "Staff"),
        RelationSpec("founded_by", "organisation", "person", "Founder", "Founder of"),
        RelationSpec("headquartered_in", "organisation", "city", "Headquarters", "Headquarters of"),
        RelationSpec("in_country", "city", "country", "Country", "Cities"),
        RelationSpec("capital", "country", "city", "Capital", "Capital of"),
        RelationSpec("mayor", "city", "person", "Mayor", "Mayor of"),
        RelationSpec("made_by", "product", "organisation", "Maker", "Products"),
        RelationSpec("designed_by", "product", "person", "Designer", "Designer of"),
        RelationSpec("held_in", "event", "city", "Host city", "Events held here"),
        RelationSpec("organised_by", "event", "organisation", "Organiser", "Events organised"),
        RelationSpec("winner", "event", "person", "Winner", "Winner of"),
    )
}

_OCCUPATIONS = (
    "chemist",
    "architect",
    "cartographer",
    "violinist",
    "engineer",
    "botanist",
    "novelist",
    "economist",
    "sculptor",
    "astronomer",
    "physician",
    "linguist",
    "geologist",
    "photographer",
)
_INDUSTRIES = (
    "shipbuilding",
    "textiles",
    "robotics",
    "publishing",
    "agriculture",
    "software",
    "mining",
    "pharmaceuticals",
    "aviation",
    "brewing",
    "logistics",
    "optics",
)
_CATEGORIES = (
    "bicycle",
    "telescope",
    "sewing machine",
    "synthesiser",
    "tractor",
    "camera",
    "drone",
    "espresso machine",
    "typewriter",
    "kayak",
    "wristwatch",
    "loom",
)
_DISCIPLINES = ("chess", "rowing", "fencing", "archery", "sailing", "poetry", "debating", "cycling")


@dataclass(frozen=True)
class WorldConfig:
    """How big a world to build and from which seed."""

    seed: int = 0  # the only source of randomness
    num_entities: int = 1000  # total entities across all types (at least 60)
    person_share: float = 0.38  # fraction of entities that are people
    organisation_share: float = 0.18  # fraction that are organisations
    city_share: float = 0.16  # fraction that are cities
    country_share: float = 0.05  # fraction that are countries
    product_share: float = 0.13  # fraction that are products; the rest are events


@dataclass
class Entity:
    """One thing of the world; it gets one page."""

    id: str  # stable id, e.g. "person-0007"
    type: str  # one of ENTITY_TYPES
    name: str  # unique invented name, the page title
    aliases: tuple[str, ...] = ()  # other names a grader accepts for it
    attributes: dict[str, int | str] = field(default_factory=dict)  # ATTRIBUTES name -> value
    relations: dict[str, str] = field(default_factory=dict)  # RELATIONS name -> target entity id

    @property
    def slug(self) -> str:
        return slugify(self.name)

    @property
    def url(self) -> str:
        return URL_PREFIX + self.slug


@dataclass
class World:
    """All entities of one seeded world, in id order."""

    seed: int
    entities: list[Entity]

    @cached_property
    def by_id(self) -> dict[str, Entity]:
        return {e.id: e for e in self.entities}

    @cached_property
    def by_name(self) -> dict[str, Entity]:
        return {e.name: e for e in self.entities}

    @cached_property
    def by_type(self) -> dict[str, list[Entity]]:
        groups: dict[str, list[Entity]] = {t: [] for t in ENTITY_TYPES}
        for e in self.entities:
            groups[e.type].append(e)
        return groups

    @cached_property
    def incoming(self) -> dict[str, list[tuple[str, str]]]:
        """Entity id -> [(relation name, source entity id)] of every relation pointing at it."""
        index: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for e in self.entities:
            for relation, target in e.relations.items():
                index[target].append((relation, e.id))
        return dict(index)

    def target(self, entity: Entity, relation: str) -> Entity:
        return self.by_id[entity.relations[relation]]


def format_value(attribute: str, value: int | str) -> str:
    """An attribute value as pages write it: years plain, other counts with thousands separators."""
    if isinstance(value, int) and not attribute.endswith("year"):
        return f"{value:,}"
    return str(value)


def parse_number(text: str) -> int:
    """Inverse of `format_value` for numeric attributes."""
    return int(text.replace(",", ""))


def _type_counts(config: WorldConfig) -> dict[str, int]:
    if config.num_entities < MIN_ENTITIES:
        raise ValueError(f"num_entities must be at least {MIN_ENTITIES}, got {config.num_entities}")
    n = config.num_entities
    counts = {
        "person": round(n * config.person_share),
        "organisation": round(n * config.organisation_share),
        "city": round(n * config.city_share),
        "country": max(2, round(n * config.country_share)),
        "product": round(n * config.product_share),
    }
    counts["event"] = n - sum(counts.values())
    if min(counts.values()) < 2 or counts["city"] < counts["country"]:
        raise ValueError(f"type shares give too few entities of some type: {counts}")
    return counts


class _Builder:
    """Draws one world type by type, so later types can point at earlier ones."""

    def __init__(self, config: WorldConfig) -> None:
        self.seed = config.seed
        self.rng = random.Random(config.seed)
        self.names = NameGenerator(self.rng)
        self.counts = _type_counts(config)
        self.entities: dict[str, list[Entity]] = {t: [] for t in ENTITY_TYPES}

    def new(self, type_: str, name: str, aliases: tuple[str, ...] = ()) -> Entity:
        entity = Entity(id=f"{type_}-{len(self.entities[type_]):04d}", type=type_, name=name, aliases=aliases)
        self.entities[type_].append(entity)
        return entity

    def countries_and_cities(self) -> None:
        for _ in range(self.counts["country"]):
            country = self.new("country", self.names.country())
            country.attributes["country_population"] = self.rng.randint(200, 90_000) * 1000
            country.attributes["currency"] = self.names.currency()
        countries = self.entities["country"]
        for i in range(self.counts["city"]):
            city = self.new("city", self.names.city())
            city.attributes["population"] = self.rng.randint(30, 40_000) * 100
            city.attributes["settled_year"] = self.rng.randint(900, 1900)
            # The first cities go round-robin so every country has at least one (its capital).
            country = countries[i] if i < len(countries) else self.rng.choice(countries)
            city.relations["in_country"] = country.id
        for country in countries:
            own = [c for c in self.entities["city"] if c.relations["in_country"] == country.id]
            country.relations["capital"] = self.rng.choice(own).id

    def people(self) -> None:
        cities = self.entities["city"]
        for _ in range(self.counts["person"]):
            name = self.names.person()
            given, surname = name.split(" ", 1)
            person = self.new("person", name, aliases=(f"{given[0]}. {surname}", surname))
            person.attributes["birth_year"] = self.rng.randint(1900, 2000)
            person.attributes["occupation"] = self.rng.choice(_OCCUPATIONS)
            person.relations["born_in"] = self.rng.choice(cities).id

    def organisations(self) -> None:
        people, cities = self.entities["person"], self.entities["city"]
        for _ in range(self.counts["organisation"]):
            name = self.names.organisation()
            org = self.new("organisation", name, aliases=(name.rsplit(" ", 1)[0],))
            founder = self.rng.choice(people)
            org.relations["founded_by"] = founder.id
            org.relations["headquartered_in"] = self.rng.choice(cities).id
            founded = int(founder.attributes["birth_year"]) + self.rng.randint(20, 55)
            org.attributes["founded_year"] = min(founded, 2023)
            org.attributes["industry"] = self.rng.choice(_INDUSTRIES)
            org.attributes["employees"] = self.rng.randint(5, 90_000)
        orgs = self.entities["organisation"]
        for person in people:
            person.relations["works_for"] = self.rng.choice(orgs).id
        for city in cities:
            city.relations["mayor"] = self.rng.choice(people).id

    def products(self) -> None:
        orgs, people = self.entities["organisation"], self.entities["person"]
        for _ in range(self.counts["product"]):
            product = self.new("product", self.names.product())
            maker = self.rng.choice(orgs)
            staff = [p for p in people if p.relations["works_for"] == maker.id]
            product.relations["made_by"] = maker.id
            product.relations["designed_by"] = self.rng.choice(staff or people).id
            product.attributes["release_year"] = self.rng.randint(int(maker.attributes["founded_year"]), 2024)
            product.attributes["category"] = self.rng.choice(_CATEGORIES)

    def events(self) -> None:
        cities, orgs, people = self.entities["city"], self.entities["organisation"], self.entities["person"]
        for _ in range(self.counts["event"]):
            event = self.new("event", self.names.event())
            year = self.rng.randint(1950, 2023)
            adults = [p for p in people if int(p.attributes["birth_year"]) <= year - 16]
            event.attributes["year"] = year
            event.attributes["discipline"] = self.rng.choice(_DISCIPLINES)
            event.relations["held_in"] = self.rng.choice(cities).id
            event.relations["organised_by"] = self.rng.choice(orgs).id
            event.relations["winner"] = self.rng.choice(adults or people).id

    def unique_aliases(self, entities: list[Entity]) -> None:
        """Drop aliases that two entities share or that name another entity ("Krelin" for two Krelins)."""
        uses = Counter(a for e in entities for a in dict.fromkeys(e.aliases))
        names = {e.name for e in entities}
        for e in entities:
            e.aliases = tuple(a for a in e.aliases if uses[a] == 1 and a not in names)

    def build(self) -> World:
        self.countries_and_cities()
        self.people()
        self.organisations()
        self.products()
        self.events()
        entities = [e for t in ENTITY_TYPES for e in self.entities[t]]
        self.unique_aliases(entities)
        return World(seed=self.seed, entities=entities)


def generate_world(config: WorldConfig) -> World:
    """Build the world `config` describes; the same config always gives the same world."""
    world = _Builder(config).build()
    log.debug("world generated", seed=config.seed, entities=len(world.entities))
    return world
