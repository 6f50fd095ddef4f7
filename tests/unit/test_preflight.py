"""Inputs checked before anything starts (mgrpo_actors/preflight.py, actors/node.py preflight): each bad input is
one line naming its file, line or key, `mgrpo run` and `mgrpo-node` exit 2 with it before a server starts or a
model loads; `/dev/null` and other non-regular files are named as what they are."""

from __future__ import annotations

import json
import shutil

import pytest

from actors.cli import COMPOSITION
from actors.node import main as node_main
from mgrpo_actors.cli.parser import main as tools_main
from mgrpo_actors.config import ConfigError, NodeConfig, load_config
from mgrpo_actors.models.loader import resolve_model_dir
from mgrpo_actors.preflight import InputError, check_inputs, over_budget

TINY = ["agents.main.model=tiny:main", "agents.sub.model=tiny:sub", "tools.web_entities=150"]


def _dataset(tmp_path, lines: list[bytes]):
    path = tmp_path / "questions.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _config(*overrides: str) -> NodeConfig:
    return load_config(NodeConfig, None, [*TINY, *overrides])


def _record(i: int, question: str = "Who wrote it?") -> bytes:
    return json.dumps({"id": f"q{i}", "question": question, "answer": "x"}).encode()


def test_a_dataset_line_that_is_not_utf8_is_named_by_file_and_line(tmp_path):
    path = _dataset(tmp_path, [_record(0), b'{"id": "q1", "question": "caf\xe9", "answer": "x"}'])
    with pytest.raises(ValueError, match=rf"{path}:2: not UTF-8 \(byte 0xe9") as caught:
        check_inputs(_config(f"pipeline.dataset={path}"), ["controller"])
    assert "caf" not in str(caught.value)  # the line's bytes are not dumped


def test_an_empty_dataset_and_a_line_of_bad_json_are_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="no questions"):
        check_inputs(_config(f"pipeline.dataset={empty}"), ["main-aligner"])
    broken = _dataset(tmp_path, [_record(0), b'{"id": "q1", "question": '])
    with pytest.raises(ValueError, match=rf"{broken}:2: not valid JSON"):
        check_inputs(_config(f"pipeline.dataset={broken}"), ["sub-aligner"])


def test_a_question_over_the_context_budget_is_refused_by_id(tmp_path):
    long = "word " * 3000  # ~3,000 tokens: over half of a 4,096-token budget
    path = _dataset(tmp_path, [_record(0), _record(1, long), _record(2)])
    config = _config(f"pipeline.dataset={path}", "agents.main.max_context_tokens=4096", "pipeline.queries_per_step=1")
    with pytest.raises(InputError, match=r"1 question\(s\) leave M no room .* 'q1' \(\d+ tokens\)"):
        check_inputs(config, ["controller"])
    assert over_budget([("short", "Who wrote it?")], "tiny:main", 4096) == []


def test_a_model_directory_missing_its_tokenizer_is_named_with_its_key(tmp_path):
    broken = tmp_path / "model"
    shutil.copytree(resolve_model_dir("tiny:sub"), broken)
    (broken / "tokenizer.json").unlink()
    with pytest.raises(InputError, match=r"agents\.sub\.model: model directory .* no tokenizer\.json"):
        check_inputs(_config(f"agents.sub.model={broken}"), ["sub-agent"])
    check_inputs(_config(f"agents.sub.model={broken}"), ["main-agent", "controller"])  # no role of these loads it


def test_non_regular_files_are_named_as_what_they_are(tmp_path):
    with pytest.raises(ConfigError, match=r"'/dev/null' is a character device \(not a regular file\)"):
        load_config(NodeConfig, "/dev/null", [])
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(NodeConfig, str(tmp_path), [])
    with pytest.raises(ConfigError, match="pipeline.dataset '/dev/null' .* is a character device"):
        _config("pipeline.dataset=/dev/null")
    with pytest.raises(ConfigError, match=r"config file '.*missing.yaml' does not exist"):
        load_config(NodeConfig, str(tmp_path / "missing.yaml"), [])


def test_mgrpo_run_and_mgrpo_node_exit_2_before_starting_anything(tmp_path, capsys):
    path = _dataset(tmp_path, [b'{"id": "q0", "question": "\xff", "answer": "x"}'])
    args = [f"pipeline.dataset={path}", f"run.dir={tmp_path / 'runs'}", *TINY]
    sets = [a for item in args for a in ("--set", item)]
    assert tools_main(["run", *sets], composition=COMPOSITION) == 2
    assert f"mgrpo run: error: {path}:1: not UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # no run directory, no server, no model loaded
    assert node_main(["--role", "controller", *sets]) == 2
    assert f"mgrpo-node: error: {path}:1: not UTF-8" in capsys.readouterr().err
