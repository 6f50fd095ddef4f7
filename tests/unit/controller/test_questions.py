"""The run's questions per step from its config (controller/questions.py step_schedule), docs/method.md
§Training schedule: a JSONL dataset walked B at a time, stage 1's levels first, and a ValueError naming the key
when the dataset cannot fill a step."""

import json

import pytest

from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.controller.questions import step_schedule

LEVELS = {"a": 1, "b": 1, "c": 2, "d": 2}


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "questions.jsonl"
    lines = [json.dumps({"id": q, "question": f"What is {q}?", "answer": q, "level": lv}) for q, lv in LEVELS.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def config(dataset, *overrides):
    return load_config(NodeConfig, None, [f"pipeline.dataset={dataset}", "pipeline.shuffle=false", *overrides])


def ids(schedule, steps):
    return [[q.id for q in schedule.step(n)] for n in range(steps)]


def test_questions_in_file_order_b_per_step(dataset):
    schedule = step_schedule(config(dataset, "pipeline.queries_per_step=3"))
    assert ids(schedule, 3) == [["a", "b", "c"], ["d", "a", "b"], ["c", "d", "a"]]
    assert schedule.stage(0) == 2  # no curriculum: every step is stage 2


def test_stage_one_draws_its_levels_then_stage_two_starts_from_its_own_start(dataset):
    schedule = step_schedule(
        config(dataset, "pipeline.stage1_steps=2", "pipeline.stage1_levels=[1]", "pipeline.levels=[2]")
    )
    assert ids(schedule, 4) == [["a", "b"], ["a", "b"], ["c", "d"], ["c", "d"]]
    assert [schedule.stage(n) for n in range(4)] == [1, 1, 2, 2]


def test_a_dataset_too_small_for_a_step_names_the_key(dataset):
    with pytest.raises(ValueError, match="queries_per_step is 5"):
        step_schedule(config(dataset, "pipeline.queries_per_step=5"))
    with pytest.raises(ValueError, match=r"pipeline.levels \[3\]"):
        step_schedule(config(dataset, "pipeline.levels=[3]"))


def test_a_question_pool_is_a_fixed_seeded_draw_walked_again_and_again(dataset):
    schedule = step_schedule(config(dataset, "pipeline.question_pool=2"))
    steps = ids(schedule, 4)
    assert steps[0] == steps[1] == steps[2] == steps[3] and len(set(steps[0])) == 2  # B = pool: the same two
    pools = {
        tuple(ids(step_schedule(config(dataset, "pipeline.question_pool=2", f"run.seed={s}")), 1)[0]) for s in range(8)
    }
    assert len(pools) > 1  # the seed draws the pool
    three = ids(step_schedule(config(dataset, "pipeline.question_pool=3")), 3)
    assert len({q for step in three for q in step}) == 3  # a pool of 3, revisited
    assert ids(step_schedule(config(dataset, "pipeline.question_pool=9")), 2) == [["a", "b"], ["c", "d"]]  # > all


def test_a_pool_smaller_than_a_step_is_refused_naming_the_key(dataset):
    with pytest.raises(ValueError, match="pipeline.question_pool 1 cannot fill a step"):
        config(dataset, "pipeline.question_pool=1")


def test_named_questions_make_the_pool_in_the_order_named(dataset):
    schedule = step_schedule(config(dataset, "pipeline.queries_per_step=2", "pipeline.question_ids=[d, b]"))
    assert ids(schedule, 3) == [["d", "b"], ["d", "b"], ["d", "b"]]


def test_a_named_question_the_split_lacks_is_named_in_the_error(dataset):
    with pytest.raises(ValueError, match=r"question_ids names \['zz'\]"):
        step_schedule(config(dataset, "pipeline.queries_per_step=2", "pipeline.question_ids=[a, zz]"))
    with pytest.raises(ValueError, match=r"question_ids names \['c'\]"):  # c is of level 2: not at the run's levels
        step_schedule(
            config(dataset, "pipeline.queries_per_step=2", "pipeline.levels=[1]", "pipeline.question_ids=[a, c]")
        )
