"""Several sub-agent types in the config (issue 22, 1 + n): agents.subs and learners.subs, each type's entry
starting from agents.sub / learners.sub; which names, tools and descriptions are accepted; and the commands'
loader refusing what this version does not run yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from mgrpo_actors.config import ConfigError, NodeConfig, from_dict, load_config, to_dict
from mgrpo_actors.config.runnable import load_node_config

TWO_TYPES = [
    "tools.serve=[search, visit, calculator]",
    "agents.sub.max_turns=4",
    "agents.subs.searcher.model=tiny:sub",
    "agents.subs.calculator.tools=[calculator]",
    "agents.subs.calculator.description=does arithmetic on the numbers you give it",
    "learners.sub.lr=3e-5",
    "learners.subs.calculator.lr=1e-4",
]


def _two_types(*more: str) -> NodeConfig:
    return load_config(NodeConfig, None, [*TWO_TYPES, *more])


def test_each_type_is_a_side_in_the_order_the_config_names_them():
    config = _two_types()
    assert config.sub_types == ("searcher", "calculator")
    assert config.sides == ("main", "searcher", "calculator")


def test_a_type_starts_from_agents_sub_and_its_own_keys_replace_those():
    config = _two_types()
    searcher, calculator = config.agent("searcher"), config.agent("calculator")
    assert searcher.max_turns == calculator.max_turns == 4  # from agents.sub
    assert searcher.model == "tiny:sub" and calculator.model == config.agents.sub.model
    assert calculator.description == "does arithmetic on the numbers you give it" and searcher.description is None
    assert searcher.max_new_tokens_per_turn == config.agents.sub.max_new_tokens_per_turn == 64  # cpu_agent's, not 512


def test_a_type_starts_from_agents_sub_whichever_order_or_file_gives_them(tmp_path: Path):
    first = tmp_path / "first.yaml"
    first.write_text("agents:\n  subs:\n    searcher: {model: tiny:sub}\n  sub: {max_turns: 6}\n")
    second = tmp_path / "second.yaml"
    second.write_text("agents:\n  sub: {max_turns: 7}\n")
    assert load_config(NodeConfig, [first]).agent("searcher").max_turns == 6
    assert load_config(NodeConfig, [first, second]).agent("searcher").max_turns == 7


def test_a_type_without_a_learner_entry_takes_learners_sub():
    config = _two_types()
    assert config.learner("calculator").lr == 1e-4
    assert config.learner("searcher") is config.learners.sub and config.learner("searcher").lr == 3e-5


def test_the_tools_of_a_type_default_to_search_and_visit():
    config = _two_types()
    assert config.sub_tools("searcher") == ("search", "visit")
    assert config.sub_tools("calculator") == ("calculator",)


def test_with_types_named_the_default_type_is_no_side():
    config = _two_types()
    with pytest.raises(ValueError, match="no agent 'sub': the config has main, searcher, calculator"):
        config.agent("sub")


def test_which_types_train():
    assert _two_types().trains("searcher") and _two_types().trains("calculator")
    frozen = _two_types("learners.subs.calculator.frozen=true")
    assert frozen.trains("searcher") and not frozen.trains("calculator")
    main_only = _two_types("run.method=main-only")
    assert main_only.trains("main") and not any(main_only.trains(t) for t in main_only.sub_types)


def test_a_printed_config_loads_back_to_the_same_config():
    config = _two_types()
    assert from_dict(NodeConfig, to_dict(config)) == config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["agents.subs.Searcher.model=smollm2"], "sub-agent type 'Searcher' is invalid"),
        (["agents.subs.web-reader.model=smollm2"], "sub-agent type 'web-reader' is invalid"),
        (["agents.subs.main.model=smollm2"], "sub-agent type 'main' is reserved"),
        (["learners.subs.reader.lr=1e-4"], r"learners.subs names \['reader'\], not sub-agent types of agents.subs"),
        (["agents.subs.calc.tools=[abacus]"], r"agents.subs.calc.tools names \['abacus'\], which the tool nodes do"),
        (
            ["agents.subs.calc.tools=[calculator]", "agents.subs.calc.description=sums"],
            r"agents.subs.calc.tools names \['calculator'\], which the tool nodes do not serve \(tools.serve: search",
        ),
        (["tools.serve=[calculator]", "agents.subs.calc.tools=[calculator]"], "agents.subs.calc.description is null"),
        (["run.method=single-agent", "agents.subs.searcher.model=smollm2"], "agents.subs must stay empty"),
        (["agents.subs.calc.description= "], "agent description must not be blank"),
        (["agents.sub.tools=[search]"], r"agents\.sub\.tools must stay null"),
        (["agents.sub.description=reads"], r"agents\.sub\.description must stay null"),
        (["agents.main.description=plans"], r"agents\.main\.description must stay null"),
        (["agents.subs.calc.model=smollm2", "agents.subs.calc.max_turns=0"], "agent max_turns must be >= 1"),
    ],
)
def test_what_is_refused_is_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(NodeConfig, None, overrides)


def test_a_tool_of_tools_extra_can_be_a_types_tool():
    config = load_config(
        NodeConfig,
        None,
        [
            "tools.extra=[{name: abacus, factory: 'pkg.mod:Abacus'}]",
            "tools.serve=[search, visit, abacus]",
            "agents.subs.calc.tools=[abacus]",
            "agents.subs.calc.description=counts beads",
        ],
    )
    assert config.sub_tools("calc") == ("abacus",)


@pytest.mark.parametrize("command", ["mgrpo rollout", "mgrpo eval", "mgrpo compare", "mgrpo warmup"])
def test_a_command_that_rolls_out_in_one_process_refuses_the_types_naming_them(command):
    with pytest.raises(ConfigError, match=f"sub-agent types searcher, calculator; {command} runs the one default"):
        load_node_config(None, TWO_TYPES, command)


@pytest.mark.parametrize("command", ["mgrpo run", "mgrpo-node"])
def test_the_pipeline_commands_take_the_types(command):
    assert load_node_config(None, TWO_TYPES, command).sub_types == ("searcher", "calculator")


@pytest.mark.parametrize(
    ("overrides", "what"),
    [
        (["warmup.steps=2"], "supervised warm start"),
        (["pipeline.question_pool=2", "pipeline.pool_probe_rollouts=2"], "pool probe"),
    ],
)
def test_the_warm_start_and_the_pool_probe_refuse_the_types(overrides, what):
    with pytest.raises(ConfigError, match=f"sub-agent types searcher, calculator; the {what}"):
        load_node_config(None, [*TWO_TYPES, *overrides], "mgrpo run")


def test_the_commands_loader_takes_one_type_configs_as_before():
    config = load_node_config("deploy/configs/make-run.yaml", ["run.seed=3"], "mgrpo eval")
    assert config == load_config(NodeConfig, "deploy/configs/make-run.yaml", ["run.seed=3"])
    assert config.sub_types == ("sub",)


def test_two_subs_yaml_loads_with_its_two_types():
    config = load_node_config("deploy/configs/two-subs.yaml", [], "mgrpo run")
    assert config.sub_types == ("searcher", "calculator")
    assert config.sub_tools("calculator") == ("calculator",) and config.sub_tools("searcher") == ("search", "visit")


def test_mgrpo_eval_exits_2_with_the_message(capsys):
    from mgrpo_actors.cli.parser import main

    assert main(["eval", *(f"--set={item}" for item in TWO_TYPES)]) == 2
    assert "mgrpo eval runs the one default sub-agent type" in capsys.readouterr().err


def test_a_type_may_judge_its_findings_its_own_way():
    from mgrpo_actors.agents.setup import rollout_config
    from mgrpo_actors.algo.scorers import ContainsReferenceJudge

    config = _two_types("agents.subs.calculator.expert_judge=none")
    assert rollout_config(config.agents, config.algo, config.agent("calculator")).expert is None  # β3 folded
    assert isinstance(
        rollout_config(config.agents, config.algo, config.agent("searcher")).expert, ContainsReferenceJudge
    )
    with pytest.raises(ConfigError, match=r"agents\.sub\.expert_judge must stay null"):
        load_config(NodeConfig, None, ["agents.sub.expert_judge=none"])
    with pytest.raises(ConfigError, match="agents.llm_judge"):
        _two_types("agents.subs.calculator.expert_judge=llm")
