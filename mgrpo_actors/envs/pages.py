"""One page of text per entity, with markdown links `[Name](synth://wiki/<slug>)` to related pages.

A page opens with a one-sentence summary (the search snippet), then a few sentences of colour that
state no facts, then a `Facts` list with every attribute and outgoing relation (so every fact a
question asks about is written on the page of the entity it is about), then a `See also` list of the
pages that point here (capped, so pages stay short enough for `visit` to show whole).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mgrpo_actors.envs.world import ATTRIBUTES, RELATIONS, Entity, World, format_value

__all__ = ["MAX_BACKLINKS", "Page", "build_page", "build_pages", "page_link"]

MAX_BACKLINKS = 8  # per relation on the "See also" list; more become "and N more"

_SUMMARIES = {
    "person": "{name} is a {occupation} born in {birth_year}.",
    "organisation": "{name} is an organisation in the {industry} industry, founded in {founded_year}.",
    "city": "{name} is a city with a population of {population}.",
    "country": "{name} is a country whose currency is the {currency}.",
    "product": "{name} is a {category} first released in {release_year}.",
    "event": "{name} is a {discipline} competition held in {year}.",
}
_COLOUR = (
    "Accounts of {short} vary between sources, and some archives disagree on minor details.",
    "Visitors and critics have described {short} as {adj} and {adj2}.",
    "Much of what is known about {short} comes from regional newsletters and private letters.",
    "{short} appears in several guidebooks, usually in a short paragraph.",
    "Later retrospectives called {short} {adj}, a judgement that is still debated.",
    "Local historians keep a small file on {short}, most of it unpublished.",
)
_ADJECTIVES = ("ambitious", "quiet", "influential", "eccentric", "meticulous", "restless", "modest", "bold")


@dataclass(frozen=True)
class Page:
    """A page of the synthetic web."""

    url: str  # synth://wiki/<slug>
    title: str  # the entity's name
    text: str  # body with markdown links, without the title
    links: tuple[str, ...]  # urls this page links to, in order of first appearance


def page_link(entity: Entity) -> str:
    return f"[{entity.name}]({entity.url})"


def _short_name(entity: Entity) -> str:
    # People are referred to by family name after the first mention, like in an encyclopaedia.
    return entity.name.split(" ", 1)[1] if entity.type == "person" else entity.name


def _summary(entity: Entity) -> str:
    values = {k: format_value(k, v) for k, v in entity.attributes.items()}
    return _SUMMARIES[entity.type].format(name=entity.name, **values)


def _colour(entity: Entity, rng: random.Random) -> str:
    templates = rng.sample(_COLOUR, k=2)
    adj, adj2 = rng.sample(_ADJECTIVES, k=2)
    return " ".join(t.format(short=_short_name(entity), adj=adj, adj2=adj2) for t in templates)


def _facts(entity: Entity, world: World) -> list[str]:
    lines = [f"- {ATTRIBUTES[k].label}: {format_value(k, v)}" for k, v in entity.attributes.items()]
    for relation, target_id in entity.relations.items():
        lines.append(f"- {RELATIONS[relation].label}: {page_link(world.by_id[target_id])}")
    return lines


def _see_also(entity: Entity, world: World) -> list[str]:
    by_relation: dict[str, list[Entity]] = {}
    for relation, source_id in world.incoming.get(entity.id, []):
        by_relation.setdefault(relation, []).append(world.by_id[source_id])
    lines = []
    for relation, sources in by_relation.items():
        shown = ", ".join(page_link(s) for s in sources[:MAX_BACKLINKS])
        more = f" and {len(sources) - MAX_BACKLINKS} more" if len(sources) > MAX_BACKLINKS else ""
        lines.append(f"- {RELATIONS[relation].inverse_label}: {shown}{more}")
    return lines


def _links(entity: Entity, world: World) -> tuple[str, ...]:
    urls = [world.by_id[t].url for t in entity.relations.values()]
    urls += [world.by_id[s].url for _, s in world.incoming.get(entity.id, [])]
    return tuple(dict.fromkeys(urls))


def build_page(entity: Entity, world: World, rng: random.Random) -> Page:
    parts = [_summary(entity) + " " + _colour(entity, rng), "Facts:\n" + "\n".join(_facts(entity, world))]
    see_also = _see_also(entity, world)
    if see_also:
        parts.append("See also:\n" + "\n".join(see_also))
    text = "\n\n".join(parts)
    # Only links actually written in the text count: backlinks past the cap are not on the page.
    links = tuple(url for url in _links(entity, world) if f"]({url})" in text)
    return Page(url=entity.url, title=entity.name, text=text, links=links)


def build_pages(world: World) -> list[Page]:
    """One page per entity, in the world's entity order; deterministic for the world's seed."""
    rng = random.Random(f"{world.seed}-pages")
    return [build_page(entity, world, rng) for entity in world.entities]
