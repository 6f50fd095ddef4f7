"""The agents' set-up from the config: a model whose chat template cannot write an agent's conversation fails at
load naming its directory; training's JSONL is read under `pipeline.dataset_fields` (as `mgrpo eval` reads one)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mgrpo_actors.agents.setup import load_agent, load_task_questions
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.config.node import ToolsConfig
from mgrpo_actors.config.pipeline import PipelineConfig
from mgrpo_actors.envs.dataset import DatasetError
from mgrpo_actors.envs.qa import QuestionFields
from mgrpo_actors.models.loader import ModelSpecError, resolve_model_dir

# A template of the kind some model families ship: user and assistant turns only.
NO_TOOL_ROLE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Only user, system and assistant roles are supported') }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_a_template_without_tool_turns_fails_at_load_naming_the_directory(tmp_path: Path):
    model_dir = tmp_path / "models" / "my-sub"
    shutil.copytree(resolve_model_dir("tiny:sub"), model_dir)
    (model_dir / "chat_template.jinja").write_text(NO_TOOL_ROLE)
    with pytest.raises(ModelSpecError) as error:
        load_agent(AgentConfig(model=str(model_dir)))
    message = str(error.value)
    assert message.startswith(f"model directory {str(model_dir)!r}: its chat template cannot render")
    assert "Only user, system and assistant roles are supported" in message


def test_a_directory_with_a_chatml_template_loads_as_an_agent(tmp_path: Path):
    model_dir = tmp_path / "models" / "my-sub"
    shutil.copytree(resolve_model_dir("tiny:sub"), model_dir)
    agent = load_agent(AgentConfig(model=str(model_dir)))
    assert agent.tokenizer.chat_template


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_training_reads_a_jsonl_under_its_own_field_names(tmp_path: Path):
    path = _write(
        tmp_path / "own.jsonl",
        [
            {"qid": "q1", "prompt": "Where is the office?", "target": "Lisbon", "accept": ["lisboa"]},
            {"prompt": "b?", "target": 2},
        ],
    )
    fields = QuestionFields(question="prompt", answer="target", id="qid", aliases="accept")
    questions = load_task_questions(PipelineConfig(dataset=str(path), dataset_fields=fields), ToolsConfig())
    first, second = questions.training(PipelineConfig(dataset=str(path)))
    assert (first.id, first.question, first.answers) == ("q1", "Where is the office?", ["Lisbon", "lisboa"])
    assert (second.id, second.answer) == ("line-2", "2")
    assert set(questions.by_id) == {"q1", "line-2"}


def test_a_file_with_its_own_field_names_read_without_a_mapping_says_which_key_maps_them(tmp_path: Path):
    path = _write(tmp_path / "own.jsonl", [{"id": "q1", "prompt": "Where is the office?", "target": "Lisbon"}])
    with pytest.raises(DatasetError) as error:
        load_task_questions(PipelineConfig(dataset=str(path)), ToolsConfig())
    assert "own.jsonl:1: field 'question' must be str" in str(error.value)
    assert "name them in pipeline.dataset_fields" in str(error.value)


def test_a_mapping_needs_a_jsonl_dataset():
    with pytest.raises(ValueError, match="pipeline.dataset_fields names the fields of a JSONL pipeline.dataset"):
        PipelineConfig(dataset_fields=QuestionFields(question="prompt"))
