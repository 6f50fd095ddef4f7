"""Plain single-turn GRPO (issue 10): the single agent with no tools (`agents.main.tools: []`) and one
turn, its config checks, its prompt and scoring, the numeric-match judge, the arithmetic prompt set, the
bench's model preset, and deploy/configs/grpo.yaml being the job `mgrpo bench grpo` times."""

from __future__ import annotations

import itertools
import json

import pytest

from actors.roles import expand_roles
from mgrpo_actors.agents.prompts import PLAIN_PROMPT
from mgrpo_actors.agents.setup import make_judges
from mgrpo_actors.agents.single import single_episode
from mgrpo_actors.algo.scorers import NumericMatchJudge, numeric_match, parse_number
from mgrpo_actors.bench.grpo import BENCH_ONLY, GRPO_JOB
from mgrpo_actors.config import ConfigError, NodeConfig, load_config, to_dict
from mgrpo_actors.config.agents import AgentConfig, AgentsConfig
from mgrpo_actors.envs.arithmetic import OPERATIONS, arithmetic_questions
from mgrpo_actors.envs.dataset import load_questions
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.models.tiny import TINY_PRESETS
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import AgentModel
from mgrpo_actors.rollout.local import run_single_agent_rollouts
from tests.agent_helpers import small_web, tiny_tokenizer, web_tools
from tests.helpers import REPO
from tests.scripted_engine import ScriptedEngine

GRPO_YAML = REPO / "deploy" / "configs" / "grpo.yaml"
PLAIN = AgentConfig(max_turns=1, max_new_tokens_per_turn=32, tools=[])


# --- config ---------------------------------------------------------------------------------------


def test_the_single_agents_tools_are_checked_and_named_when_wrong():
    with pytest.raises(ConfigError, match=r"agents\.main.*tools.*'delegate'.*search, visit, reason"):
        load_config(NodeConfig, None, ["run.method=single-agent", "agents.main.tools=[search, delegate]"])
    with pytest.raises(ConfigError, match=r"agents\.sub\.tools must stay null"):
        load_config(NodeConfig, None, ["agents.sub.tools=[]"])
    for method in ("m-grpo", "main-only"):  # M's tools are reason and delegate: the key would be ignored
        with pytest.raises(ConfigError, match=rf"agents\.main\.tools .* run\.method is {method}"):
            load_config(NodeConfig, None, [f"run.method={method}", "agents.main.tools=[]"])
    plain = load_config(NodeConfig, None, ["run.method=single-agent", "agents.main.tools=[]"])
    assert plain.agents.main.tools == [] and NodeConfig().agents.main.tools is None


def test_a_plain_run_has_no_tool_role_and_a_single_agent_with_search_keeps_it():
    plain = load_config(NodeConfig, GRPO_YAML)
    assert expand_roles(["all"], plain) == ["main-aligner", "main-agent", "main-learner", "controller"]
    for tools in ("[reason]", "[]"):
        config = load_config(NodeConfig, None, ["run.method=single-agent", f"agents.main.tools={tools}"])
        assert "tool" not in expand_roles(["all"], config)
    searching = load_config(NodeConfig, None, ["run.method=single-agent", "agents.main.tools=[search]"])
    assert "tool" in expand_roles(["all"], searching)
    assert "tool" in expand_roles(["all"], load_config(NodeConfig, None, ["run.method=single-agent"]))


def test_grpo_yaml_is_the_job_the_bench_times():
    """The bench's GRPO_JOB overrides give grpo.yaml's config, but for what the bench sets itself."""
    bench_sets = ("run.id", "agents.main.model", "pipeline.dataset", "pipeline.steps", "learners.main.checkpoint_every")
    yaml = to_dict(load_config(NodeConfig, GRPO_YAML))
    bench = to_dict(load_config(NodeConfig, None, list(GRPO_JOB)))
    for key in bench_sets:
        *sections, name = key.split(".")
        for tree in (yaml, bench):
            for section in sections:
                tree = tree[section]
            tree.pop(name)
    assert yaml == bench
    assert BENCH_ONLY == ("learners.main.checkpoint_every=0",)
    config = load_config(NodeConfig, GRPO_YAML)
    assert (
        config.pipeline.queries_per_step,
        config.pipeline.rollouts_per_query,
        config.agents.main.max_new_tokens_per_turn,
    ) == (4, 8, 32)
    # one pass, one optimizer step
    assert config.algo.objective.kl_coef == 0.0 and config.learners.main.micro_batch_samples == 32


# --- the plain episode ----------------------------------------------------------------------------


def test_the_plain_prompt_is_the_instruction_and_the_question_without_tools_or_demonstration():
    tokenizer = tiny_tokenizer()
    episode = single_episode("What is 12 + 13?", tokenizer, web_tools(small_web()), PLAIN, rollout_index=0)
    prompt = tokenizer.decode(episode.next_prompt_ids())
    assert prompt == (
        f"<|im_start|>system\n{PLAIN_PROMPT}<|im_end|>\n"
        "<|im_start|>user\nWhat is 12 + 13?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert episode.tool_names == ()
    everything = single_episode(
        "Q?", tokenizer, web_tools(small_web()), AgentConfig(tools=["search", "reason"]), rollout_index=0
    )
    assert everything.tool_names == ("search", "reason")  # a subset narrows what it is shown and may call


def test_each_plain_rollout_is_one_turn_scored_by_the_judge():
    responses = itertools.cycle(
        [
            "<think>12 and 13</think><answer>25</answer>",
            "<answer>25.0</answer>",
            "<answer>-25</answer>",
            "twenty-five",
            '<tool_call>{"name": "search", "arguments": {"query": "25"}}</tool_call>',
        ]
    )
    engine = ScriptedEngine(tiny_tokenizer(), lambda prompt: next(responses))
    question = Question(id="q", question="What is 12 + 13?", answer="25")
    cfg = RolloutConfig(main=PLAIN, correct=NumericMatchJudge())
    group = run_single_agent_rollouts(
        question, 5, AgentModel(engine, tiny_tokenizer()), web_tools(small_web()), cfg, seed=0
    )
    assert len(engine.calls) == 1 and len(engine.calls[0][0]) == 5  # one batched generation: one turn each
    assert [len(r.main.turns) for r in group.rollouts] == [1] * 5
    # α1 = 0.1, α2 = 0.9
    assert [r.main_score.reward for r in group.rollouts] == pytest.approx([1.0, 1.0, 0.1, 0.0, 0.0])
    assert [r.main.answer for r in group.rollouts] == ["25", "25.0", "-25", None, None]
    # nothing was called
    assert group.main_stats.tools_s == 0.0 and all(r.main.turns[0].tool_result is None for r in group.rollouts)


# --- numeric match ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prediction", "reference", "score"),
    # a reference that is no number: exact match
    [
        ("4", "4", 1.0),
        ("4.0", "4", 1.0),
        ("+4", "4", 1.0),
        (" 1,000 ", "1000", 1.0),
        ("\u22123", "-3", 1.0),
        ("1e3", "1000", 1.0),
        ("-4", "4", 0.0),
        ("1.5", "15", 0.0),
        ("four", "4", 0.0),
        ("", "4", 0.0),
        ("nan", "4", 0.0),
        ("1000001", "1000000", 0.0),
        ("0.0000005", "0", 0.0),
        ("1e400", "1e500", 0.0),
        ("2 3", "23", 0.0),
        ("1,5", "15", 0.0),
        ("12,345.5", "12345.5", 1.0),
        ("4.000001", "4", 0.0),
        ("0.1", "1e-1", 1.0),  # exact: no tolerance, commas only as thousands separators
        ("Paris", "paris", 1.0),
        ("Rome", "Paris", 0.0),
    ],
)
def test_numeric_match_compares_numbers_where_exact_match_would_strip_their_signs(prediction, reference, score):
    assert numeric_match(prediction, reference) == score
    assert NumericMatchJudge().score("q", prediction, reference).score == score


def test_numeric_match_is_the_configured_correct_judge():
    correct, _ = make_judges(AgentsConfig(correct_judge="numeric-match"))
    assert correct.name == "numeric-match" and parse_number("2.50") == 2.5 and parse_number("inf") is None


# --- the prompt set and the bench model ---------------------------------------------------------------


def test_the_shipped_arithmetic_prompts_are_the_generators_and_their_answers_are_right():
    shipped = load_questions(REPO / "deploy" / "data" / "arithmetic.jsonl")
    assert shipped == arithmetic_questions(200)
    for question in shipped:
        a, symbol, b = question.question.removeprefix("What is ").removesuffix("?").split()
        assert OPERATIONS[symbol](int(a), int(b)) == int(question.answer)
    assert {q.question.split()[3] for q in shipped} == set(OPERATIONS)
    assert arithmetic_questions(5, seed=1) != arithmetic_questions(5, seed=2)


def test_the_bench_preset_is_the_stated_qwen2_shape():
    from mgrpo_actors.models.tiny import tiny_model_dir

    preset = TINY_PRESETS["grpo"]
    assert (
        preset.architecture,
        preset.hidden_size,
        preset.num_hidden_layers,
        preset.num_attention_heads,
        preset.intermediate_size,
        preset.vocab_size,
    ) == ("qwen2", 128, 4, 4, 384, 512)
    config = json.loads((tiny_model_dir("grpo") / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["model_type"] == "qwen2"
    assert (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["num_attention_heads"],
        config["intermediate_size"],
    ) == (128, 4, 4, 384)
    assert config["vocab_size"] == 512 + 6  # the trained BPE vocabulary, then the six format tags
