"""Questions: reachable through the real tools, unique answers, disjoint splits, every kind and stage."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from mgrpo_actors.algo.scorers import numeric_match
from mgrpo_actors.envs.qa import Evidence, Question
from mgrpo_actors.envs.questions import (
    QUESTION_KINDS,
    QuestionConfig,
    combine_facts,
    generate_questions,
    max_difference_share,
)
from mgrpo_actors.envs.synthetic_web import SyntheticWeb, SyntheticWebConfig, build_synthetic_web
from mgrpo_actors.envs.world import WorldConfig, parse_number
from mgrpo_actors.tools.calculator import CalculatorTool
from mgrpo_actors.tools.search import SearchTool
from mgrpo_actors.tools.visit import VisitTool

CONFIG = SyntheticWebConfig(
    world=WorldConfig(seed=11, num_entities=400), questions=QuestionConfig(num_questions=800, difference_share=0.05)
)


@pytest.fixture(scope="module")
def web() -> SyntheticWeb:
    return build_synthetic_web(CONFIG)


@pytest.fixture(scope="module")
def search(web: SyntheticWeb) -> SearchTool:
    return SearchTool(web.pages)


@pytest.fixture(scope="module")
def visit(web: SyntheticWeb) -> VisitTool:
    return VisitTool(web.pages)


def fact_on_page(fact: str, content: str) -> bool:
    """`fact` is the value of a line of the page's Facts list, plain or as a link's text."""
    value = re.escape(fact)
    return re.search(rf"^- [^:\n]+: (?:{value}$|\[{value}\]\()", content, re.MULTILINE) is not None


def follow(chain: Evidence, search: SearchTool, visit: VisitTool) -> list[str]:
    """Search the chain's first entity, then visit its pages in order; returns the visited contents."""
    found = search({"query": chain.entities[0]})
    assert found.ok and chain.urls[0] in found.content, f"search for {chain.entities[0]!r} misses {chain.urls[0]}"
    contents = []
    for i, url in enumerate(chain.urls):
        page = visit({"url": url, "goal": "follow the evidence chain"})
        assert page.ok, page.error
        if i + 1 < len(chain.urls):
            assert f"]({chain.urls[i + 1]})" in page.content, f"{url} does not link to {chain.urls[i + 1]}"
        contents.append(page.content)
    return contents


def test_every_gold_answer_is_reachable_from_a_search(web: SyntheticWeb, search: SearchTool, visit: VisitTool) -> None:
    for q in web.questions:
        visited = []
        for chain in q.evidence:
            assert chain.entities[0] in q.question, f"{q.id}: chain start {chain.entities[0]!r} not named"
            contents = follow(chain, search, visit)
            assert fact_on_page(chain.fact, contents[-1]), f"{q.id}: {chain.fact!r} not on {chain.urls[-1]}"
            visited += contents
        # The answer follows from the facts read off the pages...
        assert combine_facts(q.operation, q.operand, q.evidence) == q.answer, q.id
        # ...and, unless it is a count or a difference, is itself written on one of the visited pages.
        if q.kind not in ("aggregate", "difference"):
            assert any(q.answer in c for c in visited), f"{q.id}: {q.answer!r} on no visited page"


def test_every_question_has_exactly_one_answer(web: SyntheticWeb) -> None:
    for q in web.questions:
        assert q.answer.strip() and q.answer not in q.aliases
        if q.operation in ("argmin", "argmax"):
            values = [parse_number(e.fact) for e in q.evidence]
            assert len(set(values)) == len(values), f"{q.id}: tie among {values}"
            assert len({e.subject for e in q.evidence}) == len(q.evidence)
        if q.operation == "count_less":
            assert all(parse_number(e.fact) != parse_number(q.operand) for e in q.evidence)
        if q.operation == "count_equal":
            assert len({e.subject for e in q.evidence}) == len(q.evidence)


def test_chain_answers_agree_with_the_world(web: SyntheticWeb) -> None:
    world = web.world
    for q in web.questions:
        if q.kind not in ("lookup", "chain"):
            continue
        (chain,) = q.evidence
        path = [world.by_name[name] for name in chain.entities]
        assert [e.url for e in path[: len(chain.urls)]] == list(chain.urls)
        for source, target in zip(path, path[1:]):
            assert target.id in source.relations.values(), f"{q.id}: no relation {source.name} -> {target.name}"
        last = path[len(chain.urls) - 1]
        written = {str(v) for v in last.attributes.values()} | {
            f"{v:,}" for v in last.attributes.values() if isinstance(v, int)
        }
        written |= {world.by_id[t].name for t in last.relations.values()}
        assert q.answer in written
        assert len(path) == len(set(e.id for e in path)), f"{q.id}: chain revisits an entity"


def test_kinds_levels_and_stages(web: SyntheticWeb) -> None:
    questions = web.questions
    assert set(Counter(q.kind for q in questions)) == set(QUESTION_KINDS)
    assert {q.hops for q in questions if q.kind == "chain"} == {2, 3, 4}
    for q in questions:
        assert q.level == sum(len(e.urls) for e in q.evidence)
        assert q.stage == (1 if q.level == 1 else 2)
        assert (q.kind == "lookup") == (q.stage == 1)
    assert all(2 <= len(q.evidence) <= 5 for q in questions if q.kind in ("compare", "aggregate"))
    assert all(len(q.evidence) == 2 and q.hops >= 2 for q in questions if q.kind == "compose")


def test_question_counts_follow_config(web: SyntheticWeb) -> None:
    counts = Counter(q.kind for q in web.questions)
    assert sum(counts.values()) == CONFIG.questions.num_questions
    assert counts["lookup"] == round(CONFIG.questions.num_questions * CONFIG.questions.lookup_share)
    assert len({q.id for q in web.questions}) == len(web.questions)


def semantic_key(q: Question) -> tuple:
    """The same question up to the order it names entities (or noun phrases) in."""
    if q.kind in ("lookup", "chain"):
        return (q.question,)
    if q.kind == "compose":  # "Which was founded first: <phrase> or <phrase>?"
        head, _, tail = q.question.partition(": ")
        a, _, b = tail.rstrip("?").partition(" or ")
        return (head, frozenset((a, b)))
    names = [e.entities[0] for e in q.evidence]
    template = q.question
    for name in sorted(names, key=len, reverse=True):
        template = template.replace(name, "{}")
    return (template, frozenset(names))


def test_splits_do_not_overlap(web: SyntheticWeb) -> None:
    ids = {name: {q.id for q in qs} for name, qs in web.splits.items()}
    texts = {name: {q.question for q in qs} for name, qs in web.splits.items()}
    keys = {name: {semantic_key(q) for q in qs} for name, qs in web.splits.items()}
    names = list(web.splits)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not ids[a] & ids[b] and not texts[a] & texts[b] and not keys[a] & keys[b], (a, b)
    assert sum(len(v) for v in ids.values()) == len(web.questions)
    total = len(web.questions)
    assert abs(len(web.splits["train"]) - 0.8 * total) <= 10
    assert all(len(web.splits[name]) > 0 for name in ("validation", "test"))
    for name in names:  # stratified: every kind appears in every split
        assert {q.kind for q in web.splits[name]} == set(QUESTION_KINDS)


def test_small_world_yields_fewer_questions_without_duplicates() -> None:
    tiny = build_synthetic_web(
        SyntheticWebConfig(world=WorldConfig(seed=1, num_entities=60), questions=QuestionConfig(num_questions=5000))
    )
    texts = [q.question for q in tiny.questions]
    assert 0 < len(texts) < 5000
    assert len(set(texts)) == len(texts)


def test_combine_facts_operations() -> None:
    ev = [
        Evidence("A", "1,200", ("u1",), ("A",)),
        Evidence("B", "900", ("u2",), ("B",)),
        Evidence("C", "1,500", ("u3",), ("C",)),
    ]
    assert combine_facts("argmin", "", ev) == "B"
    assert combine_facts("argmax", "", ev) == "C"
    assert combine_facts("count_less", "1000", ev) == "1"
    assert combine_facts("lookup", "", ev[:1]) == "1,200"
    cities = [Evidence("A", "Brakton", ("u1",), ("A",)), Evidence("B", "Zai", ("u2",), ("B",))]
    assert combine_facts("count_equal", "Zai", cities) == "1"
    with pytest.raises(ValueError, match="unknown operation"):
        combine_facts("median", "", ev)


def test_generate_questions_is_deterministic(web: SyntheticWeb) -> None:
    first = generate_questions(web.world, QuestionConfig(num_questions=200))
    second = generate_questions(web.world, QuestionConfig(num_questions=200))
    assert first == second


def test_difference_answers_subtract_two_facts_read_off_the_pages(web: SyntheticWeb) -> None:
    differences = [q for q in web.questions if q.kind == "difference"]
    assert len(differences) == round(CONFIG.questions.num_questions * CONFIG.questions.difference_share)
    calculator = CalculatorTool()
    years = 0
    for q in differences:
        low, high = (parse_number(e.fact) for e in q.evidence)
        assert high > low and q.answer == str(high - low), q.id
        assert (q.level, q.stage, q.hops, q.operation) == (2, 2, 1, "difference")
        assert all(e.subject in q.question for e in q.evidence), q.id
        if q.question.startswith("How many years after"):  # the earlier one is named first
            years += 1
            assert q.question.index(q.evidence[0].subject) < q.question.index(q.evidence[1].subject), q.id
        else:  # "How many more ... does <larger> have than <smaller>?"
            assert q.question.index(q.evidence[1].subject) < q.question.index(q.evidence[0].subject), q.id
        worked = calculator({"expression": f"{high} - {low}"}).content.rsplit(" = ", 1)[1]
        assert numeric_match(worked, [q.answer, *q.aliases]) == 1.0, q.id
        if high - low >= 1000:
            assert f"{high - low:,}" in q.aliases
    assert 0 < years < len(differences)  # both wordings drawn


def test_difference_questions_leave_the_other_kinds_as_they_were() -> None:
    world = WorldConfig(seed=5, num_entities=300)
    without = build_synthetic_web(SyntheticWebConfig(world=world, questions=QuestionConfig(num_questions=300)))
    with_them = build_synthetic_web(
        SyntheticWebConfig(world=world, questions=QuestionConfig(num_questions=300, difference_share=0.1))
    )
    assert "difference" not in {q.kind for q in without.questions}
    before = [(q.question, q.answer) for q in generate_questions(without.world, QuestionConfig(num_questions=300))]
    after = generate_questions(with_them.world, QuestionConfig(num_questions=300, difference_share=0.1))
    others = [(q.question, q.answer) for q in after if q.kind != "difference"]
    assert others == before[: len(others)]  # the same draws; only the last aggregates make room
    assert sum(q.kind == "difference" for q in after) == 30


def test_the_difference_share_has_the_room_the_other_shares_leave() -> None:
    assert max_difference_share() == pytest.approx(0.1)  # the defaults: 0.30 + 0.35 + 0.15 + 0.10 fixed
    assert max_difference_share(QuestionConfig(lookup_share=0.5)) == pytest.approx(0.0)  # 1.1 fixed: no room
    roomy = QuestionConfig(num_questions=100, lookup_share=0.2, difference_share=0.2)
    assert max_difference_share(roomy) == pytest.approx(0.2)
