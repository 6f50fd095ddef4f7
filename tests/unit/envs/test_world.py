"""The synthetic world and its pages: deterministic per seed, unique names, consistent links and facts."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from mgrpo_actors.envs.dataset import entity_record
from mgrpo_actors.envs.qa import question_to_dict
from mgrpo_actors.envs.questions import QuestionConfig
from mgrpo_actors.envs.synthetic_web import SyntheticWeb, SyntheticWebConfig, build_synthetic_web
from mgrpo_actors.envs.world import ATTRIBUTES, ENTITY_TYPES, RELATIONS, URL_PREFIX, WorldConfig, format_value
from tests.helpers import REPO

SMALL = SyntheticWebConfig(world=WorldConfig(seed=7, num_entities=300), questions=QuestionConfig(num_questions=500))


def digest(web: SyntheticWeb) -> str:
    """A fingerprint of everything generated: entities, pages and split questions."""
    blob = {
        "entities": [entity_record(e) for e in web.world.entities],
        "pages": [[p.url, p.title, p.text, list(p.links)] for p in web.pages],
        "splits": {name: [question_to_dict(q) for q in qs] for name, qs in web.splits.items()},
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


@pytest.fixture(scope="module")
def web() -> SyntheticWeb:
    return build_synthetic_web(SMALL)


def test_same_seed_gives_identical_web(web: SyntheticWeb) -> None:
    again = build_synthetic_web(SMALL)
    assert [entity_record(e) for e in again.world.entities] == [entity_record(e) for e in web.world.entities]
    assert again.pages == web.pages
    assert again.splits == web.splits
    assert digest(again) == digest(web)


def test_different_seeds_give_different_webs(web: SyntheticWeb) -> None:
    other = build_synthetic_web(replace(SMALL, world=replace(SMALL.world, seed=8)))
    assert digest(other) != digest(web)
    assert {e.name for e in other.world.entities} != {e.name for e in web.world.entities}
    assert [q.question for q in other.questions] != [q.question for q in web.questions]


def test_generation_does_not_depend_on_hash_seed(web: SyntheticWeb) -> None:
    # Iterating a set of strings would make the world depend on PYTHONHASHSEED across processes.
    code = (
        "from tests.unit.envs.test_world import SMALL, digest;"
        "from mgrpo_actors.envs.synthetic_web import build_synthetic_web;"
        "print(digest(build_synthetic_web(SMALL)))"
    )
    root = str(REPO)
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip().splitlines()[-1] == digest(web)


def test_entity_counts_follow_config(web: SyntheticWeb) -> None:
    assert len(web.world.entities) == SMALL.world.num_entities
    counts = {t: len(es) for t, es in web.world.by_type.items()}
    assert set(counts) == set(ENTITY_TYPES) and min(counts.values()) >= 2


def test_names_and_urls_are_unique(web: SyntheticWeb) -> None:
    names = [e.name for e in web.world.entities]
    urls = [e.url for e in web.world.entities]
    assert len(set(names)) == len(names)
    assert len(set(urls)) == len(urls)
    assert all(u.startswith(URL_PREFIX) and u[len(URL_PREFIX) :] for u in urls)


def test_aliases_point_at_one_entity_only(web: SyntheticWeb) -> None:
    aliases = [a for e in web.world.entities for a in e.aliases]
    names = {e.name for e in web.world.entities}
    assert len(aliases) == len(set(aliases)) and not set(aliases) & names
    people = web.world.by_type["person"]
    surnames = [p.name.split(" ", 1)[1] for p in people]
    shared = {s for s in surnames if surnames.count(s) > 1}
    assert shared, "some people should share a family name"
    assert all(p.name.split(" ", 1)[1] not in p.aliases for p in people if p.name.split(" ", 1)[1] in shared)
    assert any(p.aliases for p in people)


def test_relations_are_typed_and_point_at_existing_entities(web: SyntheticWeb) -> None:
    for entity in web.world.entities:
        for relation, target_id in entity.relations.items():
            spec = RELATIONS[relation]
            assert spec.domain == entity.type
            assert web.world.by_id[target_id].type == spec.range
            assert target_id != entity.id
        assert all(ATTRIBUTES[a].owner == entity.type for a in entity.attributes)


def test_world_facts_are_plausible(web: SyntheticWeb) -> None:
    world = web.world
    for country in world.by_type["country"]:
        assert world.target(country, "capital").relations["in_country"] == country.id
    for org in world.by_type["organisation"]:
        assert org.attributes["founded_year"] > world.target(org, "founded_by").attributes["birth_year"]
    for product in world.by_type["product"]:
        assert product.attributes["release_year"] >= world.target(product, "made_by").attributes["founded_year"]


def test_every_page_states_its_entitys_facts_and_links(web: SyntheticWeb) -> None:
    pages = {p.url: p for p in web.pages}
    assert len(pages) == len(web.world.entities)
    for entity in web.world.entities:
        page = pages[entity.url]
        assert page.title == entity.name
        for attribute, value in entity.attributes.items():
            assert f"- {ATTRIBUTES[attribute].label}: {format_value(attribute, value)}\n" in page.text + "\n"
        for relation, target_id in entity.relations.items():
            target = web.world.by_id[target_id]
            assert f"- {RELATIONS[relation].label}: [{target.name}]({target.url})" in page.text
            assert target.url in page.links


def test_page_links_are_exactly_the_urls_in_the_text(web: SyntheticWeb) -> None:
    pages = {p.url: p for p in web.pages}
    for page in web.pages:
        assert all(link in pages for link in page.links)
        assert all(f"]({link})" in page.text for link in page.links)
        assert page.text.count("](synth://") >= len(page.links)


def test_backlinks_are_listed_on_the_target_page(web: SyntheticWeb) -> None:
    pages = {p.url: p for p in web.pages}
    for entity in web.world.entities:
        for target_id in entity.relations.values():
            target_page = pages[web.world.by_id[target_id].url]
            # The "See also" list is capped per relation; entities past the cap are summed up as "N more".
            assert entity.url in target_page.links or " more" in target_page.text
