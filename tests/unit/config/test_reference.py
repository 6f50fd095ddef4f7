"""The config reference has one source: the field docstrings of the config dataclasses. deploy/configs/default.yaml
and docs/reference/config.md are rendered from them (`make config-docs`) and must not drift; every field has a doc;
the per-agent block is documented once."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
import yaml

from mgrpo_actors.algo.config import JudgeConfig
from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.config.reference import (
    MARKDOWN_PATH,
    YAML_PATH,
    config_classes,
    drifted,
    field_docs,
    render_markdown,
    render_yaml,
)
from tests.helpers import REPO


@pytest.mark.parametrize(("path", "render"), [(YAML_PATH, render_yaml), (MARKDOWN_PATH, render_markdown)], ids=str)
def test_the_committed_file_is_what_the_dataclasses_render(path, render):
    committed = (REPO / path).read_text(encoding="utf-8") if (REPO / path).is_file() else ""
    assert committed == render(), f"{path} drifted from the config dataclasses' field docs: run `make config-docs`"


def test_the_default_yaml_loads_as_the_default_config():
    assert load_config(NodeConfig, REPO / YAML_PATH) == NodeConfig()


@pytest.mark.parametrize("cls", config_classes(), ids=lambda cls: cls.__name__)
def test_every_field_of_every_config_dataclass_has_a_doc(cls):
    docs = field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert not missing, f"{cls.__name__}: give {missing} a docstring (the string literal on the line after the field)"


def test_every_config_dataclass_is_reached():
    names = {cls.__name__ for cls in config_classes()}
    assert {"NodeConfig", "AgentConfig", "JudgeConfig", "NatsAuthConfig", "ObjectiveConfig", "WeightsConfig"} <= names


def test_the_agent_block_is_documented_once():
    markdown = render_markdown()
    assert markdown.count("`agents.<agent>`\n") == 1  # one heading
    assert "`agents.main` and `agents.sub` each are one" in markdown
    elsewhere = {f.name for cls in config_classes() if cls is not AgentConfig for f in dataclasses.fields(cls)}
    for name in set(field_docs(AgentConfig)) - elsewhere:  # (dtype and device are learners' keys too)
        assert markdown.count(f"| `{name}` |") == 1, name


def test_twin_blocks_are_written_in_full_and_documented_once():
    """agents.sub (and learners.sub) carry their own values, no YAML alias: editing main in a copy of the
    file never edits sub; the keys' docs appear once, above main's block."""
    text = render_yaml()
    assert not re.search(r":\s+[&*]\w+\s*$", text, flags=re.MULTILINE)  # no anchor, no alias
    assert text.count("max_new_tokens_per_turn:") == 2
    assert text.count("# generation budget of one turn") == 1
    edited = yaml.safe_load(text)
    edited["agents"]["main"]["model"] = "tiny:main"
    assert edited["agents"]["sub"]["model"] == NodeConfig().agents.sub.model


def test_each_twin_keeps_its_own_value():
    config = NodeConfig()
    agents = dataclasses.replace(config.agents, sub=dataclasses.replace(config.agents.sub, max_turns=5))
    changed = dataclasses.replace(config, agents=agents)
    loaded = yaml.safe_load(render_yaml(changed))
    assert (loaded["agents"]["main"]["max_turns"], loaded["agents"]["sub"]["max_turns"]) == (
        config.agents.main.max_turns,
        5,
    )


def test_a_section_that_defaults_to_none_is_null_with_its_keys_in_comments():
    text = render_yaml()
    assert "\n  llm_judge: null\n" in text
    for f in dataclasses.fields(JudgeConfig):
        assert f"#   {f.name}: " in text
    assert "### `agents.llm_judge`" in render_markdown()


def test_an_override_of_main_leaves_the_aliased_sub_alone():
    config = load_config(NodeConfig, REPO / YAML_PATH, ["agents.main.max_turns=7", "learners.sub.frozen=true"])
    assert (config.agents.main.max_turns, config.agents.sub.max_turns) == (7, NodeConfig().agents.sub.max_turns)
    assert (config.learners.main.frozen, config.learners.sub.frozen) == (False, True)


def test_check_names_the_drifted_file_and_exits_1(tmp_path):
    (tmp_path / YAML_PATH).parent.mkdir(parents=True)
    (tmp_path / YAML_PATH).write_text(render_yaml(), encoding="utf-8")
    assert drifted(tmp_path) == [tmp_path / MARKDOWN_PATH]
    command = [sys.executable, "-m", "mgrpo_actors.config.reference", "--check", "--root", str(tmp_path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and str(MARKDOWN_PATH) in result.stderr and str(YAML_PATH) not in result.stderr
