"""JSONL files of the synthetic web, loading real-benchmark questions, and `mgrpo world generate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mgrpo_actors.agents.setup import synthetic_web
from mgrpo_actors.cli import world
from mgrpo_actors.config.node import ToolsConfig
from mgrpo_actors.envs.dataset import (
    SPLITS,
    DatasetError,
    entity_record,
    load_pages,
    load_questions,
    resolve_pages,
    split_questions,
    write_jsonl,
)
from mgrpo_actors.envs.qa import Question, QuestionFields
from mgrpo_actors.envs.questions import QuestionConfig
from mgrpo_actors.envs.synthetic_web import SyntheticWebConfig, build_synthetic_web, write_synthetic_web
from mgrpo_actors.envs.world import WorldConfig

CONFIG = SyntheticWebConfig(world=WorldConfig(seed=5, num_entities=200), questions=QuestionConfig(num_questions=300))


def test_written_web_reads_back_equal(tmp_path: Path) -> None:
    web = build_synthetic_web(CONFIG)
    paths = write_synthetic_web(web, tmp_path / "web")
    header, *entities = [json.loads(line) for line in paths["world"].read_text().splitlines()]
    assert header == {"seed": web.world.seed}
    assert entities == [json.loads(json.dumps(entity_record(e))) for e in web.world.entities]
    assert load_pages(paths["pages"]) == web.pages
    assert resolve_pages(str(paths["pages"])) == web.pages
    for name in SPLITS:
        assert load_questions(paths[name]) == web.splits[name]
    manifest = json.loads(paths["manifest"].read_text())
    assert manifest["config"]["world"]["seed"] == 5
    assert sum(manifest["statistics"]["questions_per_split"].values()) == len(web.questions)


def test_external_benchmark_jsonl_loads(tmp_path: Path) -> None:
    path = tmp_path / "gaia.jsonl"
    write_jsonl(
        path,
        [
            {"id": "g1", "question": "What is 2+2?", "answer": "4", "aliases": ["four"], "Level": 1},
            {"id": 2, "question": "Capital of France?", "answer": "Paris"},
            {"id": "g3", "question": "How many legs has a spider?", "answer": 8},
        ],
    )
    q1, q2, q3 = load_questions(path)
    assert q1 == Question(id="g1", question="What is 2+2?", answer="4", aliases=("four",))
    assert q1.extra == {"Level": 1} and q1.answers == ["4", "four"]
    assert (q2.id, q2.aliases, q2.kind, q2.evidence) == ("2", (), "external", ())
    assert q3.answer == "8"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "a", "question": "q"}', "field 'answer' must be str"),
        ('{"id": "a", "answer": "x"}', "field 'question' must be str"),
        ('{"id": "a", "question": "q", "answer": "x", "aliases": "x"}', "field 'aliases' must be list"),
        ('{"id": "a", "question": "q", "answer": "x", "aliases": [1]}', "list of strings"),
        ('{"id": "", "question": "q", "answer": "x"}', "field 'id' must not be empty"),
        ('{"id": "a", "question": "q", "answer": "x", "level": "hard"}', "field 'level' must be int"),
        ('["not", "an", "object"]', "must be a JSON object"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_question_records_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "ok", "question": "q", "answer": "x"}\n\n' + line + "\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:3: .*") as info:
        load_questions(path)
    assert message in str(info.value)


def test_duplicate_ids_and_missing_files_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "dup.jsonl"
    write_jsonl(path, [{"id": "a", "question": "q", "answer": "x"}] * 2)
    with pytest.raises(DatasetError, match=r"dup\.jsonl:2: question id 'a' already on line 1$"):
        load_questions(path)
    with pytest.raises(DatasetError, match="cannot open"):
        load_questions(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DatasetError, match="no questions"):
        load_questions(empty)


def test_the_built_in_format_is_read_like_a_mapped_file_byte_by_byte(tmp_path: Path) -> None:
    """One loader for both formats: a byte-order mark is accepted, a bad byte names its line."""
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "question": "Caf\xc3\xa9?", "answer": "x", "level": 2}\r\n')
    (question,) = load_questions(path)
    assert (question.question, question.level) == ("Café?", 2)
    path.write_bytes(b'{"id": "a", "question": "q", "answer": "x"}\n{"id": "b", "question": "\xe9", "answer": "y"}\n')
    with pytest.raises(DatasetError, match=r"bom\.jsonl:2: not UTF-8"):
        load_questions(path)


def test_a_mapping_reads_the_files_own_field_names_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "own.jsonl"
    write_jsonl(
        path, [{"prompt": "Where is the office?", "target": "Lisbon", "level": 3}, {"prompt": "b?", "target": 4}]
    )
    first, second = load_questions(path, QuestionFields(question="prompt", answer="target"))
    assert (first.id, first.question, first.answer, first.level, first.extra) == (
        "line-1",
        "Where is the office?",
        "Lisbon",
        0,
        {"level": 3},
    )
    assert (second.id, second.answer) == ("line-2", "4")
    with pytest.raises(DatasetError, match=r"own\.jsonl:1: field 'id' must be str"):
        load_questions(path)  # the built-in format names its fields itself


def test_split_rejects_bad_fractions() -> None:
    with pytest.raises(ValueError, match="summing to 1"):
        split_questions([], (0.5, 0.5, 0.5))


def test_cli_generate_writes_files_and_prints_statistics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    assert world.main(["generate", "--seed", "3", "--out", str(out), "--entities", "150", "--questions", "200"]) == 0
    printed = capsys.readouterr().out
    for expected in ("entities per type", "questions per kind", "questions per level", "avg", "generated in"):
        assert expected in printed
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(["world.jsonl", "pages.jsonl", "manifest.json"] + [f"questions-{s}.jsonl" for s in SPLITS])
    assert sum(len(load_questions(out / f"questions-{s}.jsonl")) for s in SPLITS) == 200
    assert len((out / "world.jsonl").read_text().splitlines()) == 1 + 150  # the header, then the entities


def test_cli_rejects_too_small_worlds(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--entities >= 60"):
        world.main(["generate", "--out", str(tmp_path), "--entities", "10"])


def test_cli_and_config_ask_for_difference_questions(tmp_path: Path) -> None:
    out = tmp_path / "diff"
    args = ["generate", "--out", str(out), "--entities", "300", "--questions", "400", "--difference-share", "0.05"]
    assert world.main(args) == 0
    written = [q for s in SPLITS for q in load_questions(out / f"questions-{s}.jsonl")]
    assert sum(q.kind == "difference" for q in written) == 20  # 0.05 of 400
    with pytest.raises(SystemExit, match=r"--difference-share within \[0, 0.1\]"):
        world.main(["generate", "--out", str(tmp_path / "x"), "--difference-share", "0.2"])
    # the run's config key builds the same kind of web (synthetic_web: what every role's questions come from)
    tools = ToolsConfig(web_entities=300, web_difference_share=0.05)
    kinds = [q.kind for split in synthetic_web(tools).splits.values() for q in split]
    assert kinds.count("difference") == round(QuestionConfig.num_questions * 0.05)
    assert "difference" not in {
        q.kind for split in synthetic_web(ToolsConfig(web_entities=300)).splits.values() for q in split
    }
    assert ToolsConfig(web_difference_share=0.1).web_difference_share == 0.1  # the room, exactly: allowed
    with pytest.raises(ValueError, match="tools.web_difference_share"):
        ToolsConfig(web_difference_share=0.11)
    with pytest.raises(ValueError, match="tools.web_difference_share"):
        ToolsConfig(web_difference_share=-0.01)


def test_a_share_within_the_room_never_fails_on_rounding(tmp_path: Path) -> None:
    # 106 questions: the other kinds' shares round up to 96 (not 95.4), leaving 10 for 0.1's 10.6 -> 11
    out = tmp_path / "round"
    args = ["generate", "--out", str(out), "--entities", "300", "--questions", "106", "--difference-share", "0.1"]
    assert world.main(args) == 0
    written = [q for s in SPLITS for q in load_questions(out / f"questions-{s}.jsonl")]
    assert sum(q.kind == "difference" for q in written) == 10 and not any(q.kind == "aggregate" for q in written)


def test_no_difference_share_builds_the_web_it_always_built() -> None:
    tools = ToolsConfig(web_entities=300, web_seed=4)
    before = build_synthetic_web(SyntheticWebConfig(world=WorldConfig(seed=4, num_entities=300)))
    assert synthetic_web(tools).splits == before.splits
