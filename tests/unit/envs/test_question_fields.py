"""A questions JSONL under its own field names (QuestionFields: `mgrpo eval --question-field …` and training's
`pipeline.dataset_fields`, one loader): unknown fields ignored, a bad line an error naming its line number,
nothing else lost."""

import json

import pytest

from mgrpo_actors.envs.dataset import DatasetError, load_questions
from mgrpo_actors.envs.qa import QuestionFields

DEFAULT = QuestionFields()  # what `mgrpo eval --file` reads without field flags

GAIA = QuestionFields(question="Question", answer="Final answer", id="task_id", aliases="Aliases")


def write_lines(tmp_path, lines, name="questions.jsonl"):
    """Each entry a line: a dict as JSON, bytes or str as they are."""
    path = tmp_path / name
    raw = [
        line if isinstance(line, bytes) else (line if isinstance(line, str) else json.dumps(line)).encode()
        for line in lines
    ]
    path.write_bytes(b"\n".join(raw) + b"\n")
    return path


def test_default_fields_with_unknown_ones_ignored_and_kept_in_extra(tmp_path):
    path = write_lines(
        tmp_path,
        [
            {
                "id": "q1",
                "question": "Capital of France?",
                "answer": "Paris",
                "aliases": ["paris city"],
                "source": "x",
                "meta": {"a": [1]},
            },
            {"question": "Two plus two?", "answer": "4", "level": "hard", "evidence": "not ours"},
        ],
    )
    first, second = load_questions(path, DEFAULT)
    assert (first.id, first.question, first.answer, first.aliases) == (
        "q1",
        "Capital of France?",
        "Paris",
        ("paris city",),
    )
    assert first.extra == {"source": "x", "meta": {"a": [1]}}
    # A field with a name the built-in format uses is not read as such: only the configured fields count.
    assert (second.id, second.level, second.evidence) == ("line-2", 0, ())
    assert second.extra == {"level": "hard", "evidence": "not ours"}


def test_custom_field_names_as_in_a_gaia_dump(tmp_path):
    path = write_lines(
        tmp_path,
        [
            {"task_id": "c61d", "Question": "How many studio albums?", "Level": 1, "Final answer": 3, "file_name": ""},
            {
                "task_id": 17,
                "Question": "What ratio?",
                "Final answer": 0.25,
                "Aliases": "1/4",
                "Annotator Metadata": {"Steps": "..."},
            },
            {
                "task_id": "e1fc",
                "Question": "Which city?",
                "Final answer": "Berlin",
                "Aliases": ["", "Berlin, Germany", 1],
            },
        ],
    )
    questions = load_questions(path, GAIA)
    assert [q.id for q in questions] == ["c61d", "17", "e1fc"]
    assert [q.answer for q in questions] == ["3", "0.25", "Berlin"]  # numeric answers become strings
    assert [q.aliases for q in questions] == [(), ("1/4",), ("Berlin, Germany", "1")]  # a blank alias accepts nothing
    assert questions[0].extra == {"Level": 1, "file_name": ""}
    assert questions[1].extra == {"Annotator Metadata": {"Steps": "..."}}


def test_nothing_is_lost_every_non_blank_line_is_a_question(tmp_path):
    lines = [{"q": f"question {i}?", "a": f"answer {i}", "junk": i} for i in range(7)]
    path = write_lines(tmp_path, [lines[0], "", lines[1], "   ", *lines[2:]])
    questions = load_questions(path, QuestionFields(question="q", answer="a"))
    assert len(questions) == 7
    assert [q.answer for q in questions] == [f"answer {i}" for i in range(7)]
    assert [q.id for q in questions] == ["line-1", "line-3", "line-5", "line-6", "line-7", "line-8", "line-9"]


def test_a_byte_order_mark_and_crlf_line_ends_are_accepted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(
        b"\xef\xbb\xbf" + b'{"question": "Caf\xc3\xa9?", "answer": "yes"}\r\n{"question": "b?", "answer": "no"}\r\n'
    )
    assert [q.question for q in load_questions(path, DEFAULT)] == ["Café?", "b?"]


@pytest.mark.parametrize(
    "record, message",
    [
        ({"question": "Q?", "answer": ""}, "field 'answer' is empty"),
        ({"question": "Q?", "answer": "   "}, "field 'answer' is empty"),
        ({"question": "Q?", "answer": None}, "no field 'answer' (the line has 'question', 'answer')"),
        ({"question": "Q?"}, "no field 'answer' (the line has 'question')"),
        ({"question": "", "answer": "A"}, "field 'question' is empty"),
        ({"question": 5, "answer": "A"}, "field 'question' must be a string, got int"),
        ({"question": "Q?", "answer": True}, "field 'answer' must be a string or a number, got bool"),
        ({"question": "Q?", "answer": ["A"]}, "field 'answer' must be a string or a number, got list"),
        ({"question": "Q?", "answer": "A", "id": ""}, "field 'id' is empty"),
        (
            {"question": "Q?", "answer": "A", "aliases": {"x": 1}},
            "field 'aliases' must be a list of strings or one string",
        ),
        (["Q?", "A"], "a question must be a JSON object, got list"),
    ],
)
def test_a_bad_record_is_an_error_naming_file_and_line(tmp_path, record, message):
    path = write_lines(tmp_path, [{"question": "fine?", "answer": "yes"}, "", record])
    with pytest.raises(DatasetError) as error:
        load_questions(path, DEFAULT)
    assert str(error.value).startswith(f"{path}:3: ") and message in str(error.value)


def test_an_empty_answer_under_a_custom_field_name_names_that_field_and_line(tmp_path):
    path = write_lines(
        tmp_path,
        [
            {"task_id": "a", "Question": "Q?", "Final answer": "x"},
            {"task_id": "b", "Question": "Q?", "Final answer": ""},
        ],
    )
    with pytest.raises(DatasetError, match=r":2: field 'Final answer' is empty$"):
        load_questions(path, GAIA)


def test_non_utf8_bytes_are_an_error_naming_the_line(tmp_path):
    latin1 = '{"question": "Café?", "answer": "oui"}'.encode("latin-1")  # é as the single byte 0xe9
    path = write_lines(tmp_path, [{"question": "a?", "answer": "b"}, {"question": "c?", "answer": "d"}, latin1])
    with pytest.raises(DatasetError) as error:
        load_questions(path, DEFAULT)
    assert str(error.value) == f"{path}:3: not UTF-8 (byte 0xe9 at byte 18 of the line)"


def test_invalid_json_is_an_error_naming_the_line(tmp_path):
    path = write_lines(tmp_path, [{"question": "a?", "answer": "b"}, '{"question": "c?", "answer": '])
    with pytest.raises(DatasetError, match=r":2: not valid JSON \("):
        load_questions(path, DEFAULT)


def test_duplicate_ids_name_both_lines(tmp_path):
    path = write_lines(
        tmp_path, [{"id": 1, "question": "a?", "answer": "b"}, {"id": "1", "question": "c?", "answer": "d"}]
    )
    with pytest.raises(DatasetError, match=r":2: question id '1' already on line 1$"):
        load_questions(path, DEFAULT)


def test_a_missing_or_empty_file_is_an_error(tmp_path):
    with pytest.raises(DatasetError, match="cannot open"):
        load_questions(tmp_path / "nope.jsonl", DEFAULT)
    empty = write_lines(tmp_path, ["", "  "])
    with pytest.raises(DatasetError, match="no questions"):
        load_questions(empty, DEFAULT)


def test_a_field_name_must_be_a_non_empty_string():
    with pytest.raises(ValueError, match="the answer field's name must be a non-empty string"):
        QuestionFields(answer=" ")
    assert QuestionFields(aliases=None).aliases is None
