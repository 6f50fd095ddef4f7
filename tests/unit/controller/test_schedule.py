"""StepSchedule (controller/schedule.py): B questions per step, a seeded order drawn anew each epoch (or
file order), a function of (seed, step) alone, never one question twice in a step, every epoch serving
every question once."""

from collections import Counter

import pytest

from mgrpo_actors.controller.schedule import CurriculumSchedule, StepSchedule
from mgrpo_actors.envs.qa import Question

QUESTIONS = [Question(id=f"q{i}", question=f"Question {i}?", answer=str(i)) for i in range(5)]


def ids(schedule, steps):
    return [[q.id for q in schedule.step(n)] for n in range(steps)]


def test_file_order_without_shuffle():
    # 5 questions, B = 2: positions 0..9 walk the file twice; step 2 straddles the epoch boundary.
    schedule = StepSchedule(QUESTIONS, 2, seed=0, shuffle=False)
    assert ids(schedule, 5) == [["q0", "q1"], ["q2", "q3"], ["q4", "q0"], ["q1", "q2"], ["q3", "q4"]]
    # B = number of questions: every step is the whole file, in order.
    assert ids(StepSchedule(QUESTIONS, 5, seed=0, shuffle=False), 2) == [[f"q{i}" for i in range(5)]] * 2


@pytest.mark.parametrize("per_step", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_epochs_cover_every_question_once_and_steps_never_repeat(per_step, seed):
    schedule = StepSchedule(QUESTIONS, per_step, seed=seed, shuffle=True)
    epochs = 4 * per_step
    steps = ids(schedule, epochs * len(QUESTIONS) // per_step)  # a whole number of epochs
    assert all(len(step) == per_step == len(set(step)) for step in steps)  # across epoch boundaries too
    flat = [q for step in steps for q in step]
    for e in range(epochs):
        assert sorted(flat[e * 5 : (e + 1) * 5]) == [f"q{i}" for i in range(5)], (e, flat)
    assert set(Counter(flat).values()) == {epochs}


def test_boundary_steps_do_not_skew_coverage():
    # B = 4 over 5 questions: 3 of every 4 steps straddle an epoch boundary. 25 steps = 100 positions =
    # 20 epochs, so each question is served exactly 20 times and never twice in one step.
    for seed in range(20):
        steps = ids(StepSchedule(QUESTIONS, 4, seed=seed, shuffle=True), 25)
        assert all(len(set(step)) == 4 for step in steps)
        assert Counter(q for step in steps for q in step) == {f"q{i}": 20 for i in range(5)}


def test_same_seed_same_order_and_random_access():
    a = StepSchedule(QUESTIONS, 3, seed=11, shuffle=True)
    b = StepSchedule(QUESTIONS, 3, seed=11, shuffle=True)
    walked = ids(a, 12)
    assert walked == ids(b, 12)
    # A restarted controller asks for step n first (or goes back): same questions as walking there.
    fresh = StepSchedule(QUESTIONS, 3, seed=11, shuffle=True)
    assert [q.id for q in fresh.step(9)] == walked[9]
    assert [q.id for q in fresh.step(2)] == walked[2]
    # Other seeds give other orders (some of them, at least), and shuffling leaves file order.
    others = {tuple(map(tuple, ids(StepSchedule(QUESTIONS, 3, seed=s, shuffle=True), 5))) for s in range(6)}
    assert len(others) > 1
    assert any(step != sorted(step, key=lambda q: int(q[1:])) for step in walked)


def test_questions_are_returned_as_given():
    schedule = StepSchedule(QUESTIONS, 2, seed=0, shuffle=True)
    assert all(q in QUESTIONS for n in range(6) for q in schedule.step(n))
    assert all(isinstance(q, Question) for q in schedule.step(0))


def test_more_per_step_than_questions_is_an_error():
    with pytest.raises(ValueError, match="queries_per_step is 6 .* only 5 questions"):
        StepSchedule(QUESTIONS, 6, seed=0, shuffle=True)


def test_curriculum_walks_stage1_then_stage2_from_its_own_start():
    easy = [Question(id=f"e{i}", question=f"Easy {i}?", answer=str(i), level=1) for i in range(3)]
    stage1 = StepSchedule(easy, 2, seed=0, shuffle=False)
    stage2 = StepSchedule(QUESTIONS, 2, seed=0, shuffle=False)
    curriculum = CurriculumSchedule(stage1, 2, stage2)
    assert [curriculum.stage(n) for n in range(4)] == [1, 1, 2, 2]
    assert ids(curriculum, 4) == [["e0", "e1"], ["e2", "e0"], ["q0", "q1"], ["q2", "q3"]]


def test_curriculum_without_stage1_is_stage2():
    curriculum = CurriculumSchedule(None, 0, StepSchedule(QUESTIONS, 2, seed=3, shuffle=True))
    assert ids(curriculum, 3) == ids(StepSchedule(QUESTIONS, 2, seed=3, shuffle=True), 3)
    with pytest.raises(ValueError, match="stage-1 questions"):
        CurriculumSchedule(None, 2, StepSchedule(QUESTIONS, 2, seed=3, shuffle=True))
