"""The oracle's worked episodes (warmup/oracle.py) for the format warm-up: run through the real agent
loop and tools, they must be what a perfect rollout would be: valid format, correct answer, S's
findings holding the evidence, and a loss mask on exactly the agent's own turns."""

import dataclasses
import json

import pytest
import torch

from mgrpo_actors.agents.setup import synthetic_web
from mgrpo_actors.config.node import ToolsConfig
from mgrpo_actors.config.warmup import WebWarmupConfig
from mgrpo_actors.engines.base import SamplingParams
from mgrpo_actors.models.loader import load_model, load_tokenizer, resolve_model_dir
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.warmup.oracle import OracleEngine, oracle_demonstrations, oracle_subtask, single_page
from mgrpo_actors.warmup.supervised import WarmupConfig, warm_up_trajectories
from mgrpo_actors.warmup.web import warmup_questions

TOOLS = ToolsConfig(web_entities=300)


@pytest.fixture(scope="module")
def stage1():
    return [q for q in synthetic_web(TOOLS).splits["train"] if q.level == 1][:6]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(resolve_model_dir("tiny:main"))


def _assistant_text(tokenizer, trajectory):
    return tokenizer.decode([int(t) for t, m in zip(trajectory.token_ids, trajectory.loss_mask) if m])


def test_m_and_s_episodes_are_valid_correct_and_masked_to_their_own_turns(stage1, tokenizer):
    demos = oracle_demonstrations(stage1, tokenizer, tokenizer, TOOLS, RolloutConfig())
    assert len(demos.main) == len(stage1) and len(demos.sub) == len(stage1)  # one delegation per question
    for question, main, sub in zip(stage1, demos.main, demos.sub):
        chain = question.evidence[0]
        mine = _assistant_text(tokenizer, main)
        assert '"delegate"' in mine and f"<answer>{question.answer}</answer>" in mine
        assert "Title:" not in mine and "findings" not in mine  # S's result is a tool message: no loss on it
        theirs = _assistant_text(tokenizer, sub)
        assert '"search"' in theirs and chain.urls[-1] in theirs and chain.fact in theirs
        assert "Facts:" not in theirs  # the visited page is the tool's, not S's
        # the real visit output is in the episode
        assert f"URL: {chain.urls[-1]}" in tokenizer.decode(list(sub.token_ids))


def test_the_single_agent_searches_visits_and_answers(stage1, tokenizer):
    demos = oracle_demonstrations(stage1, tokenizer, None, TOOLS, RolloutConfig())
    assert demos.sub == [] and len(demos.main) == len(stage1)
    text = _assistant_text(tokenizer, demos.main[0])
    assert '"search"' in text and '"visit"' in text and f"<answer>{stage1[0].answer}</answer>" in text


def test_the_oracle_refuses_questions_it_was_not_given(stage1, tokenizer):
    engine = OracleEngine(tokenizer, "main", stage1[:1])
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Who wrote an unknown book?"}], add_generation_prompt=True
    )
    with pytest.raises(ValueError, match="questions it was given"):
        engine._turn(tokenizer.decode(prompt if isinstance(prompt, list) else prompt["input_ids"]))


def test_warm_up_on_the_episodes_lowers_the_loss(stage1, tokenizer):
    demos = oracle_demonstrations(stage1, tokenizer, tokenizer, TOOLS, RolloutConfig())
    model, _ = load_model("tiny:main")
    losses = warm_up_trajectories(model, demos.main, WarmupConfig(steps=15, batch_size=2, lr=3e-3)).losses
    assert len(losses) == 15 and sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3, losses


def test_bf16_autocast_computes_the_same_loss_with_fp32_weights(stage1, tokenizer):
    # warmup.dtype bfloat16: only the matrix products run in bf16 (autocast); the weights and AdamW stay fp32
    demos = oracle_demonstrations(stage1[:2], tokenizer, tokenizer, TOOLS, RolloutConfig())
    cfg = WarmupConfig(steps=1, batch_size=2, lr=1e-3, seed=0)
    losses = {}
    for dtype in ("float32", "bfloat16"):
        model, _ = load_model("tiny:main")
        losses[dtype] = warm_up_trajectories(model, demos.main, cfg, compute_dtype=dtype).losses[0]
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert losses["bfloat16"] != losses["float32"]  # the products did run in bf16
    assert losses["bfloat16"] == pytest.approx(losses["float32"], rel=0.02)


def test_questions_over_several_entities_delegate_one_subtask_each_then_answer(tokenizer):
    train = synthetic_web(TOOLS).splits["train"]
    several = [q for q in train if q.kind in ("compare", "aggregate")][:4]
    assert min(len(q.evidence) for q in several) > 1 and all(single_page(q) for q in several)
    cfg = RolloutConfig(main=dataclasses.replace(RolloutConfig().main, max_turns=6))
    demos = oracle_demonstrations(several, tokenizer, tokenizer, TOOLS, cfg)
    assert len(demos.main) == len(several) and len(demos.sub) == sum(len(q.evidence) for q in several)
    subs = iter(demos.sub)
    for question, main in zip(several, demos.main):
        mine = _assistant_text(tokenizer, main)
        assert mine.count('"delegate"') == len(question.evidence) and f"<answer>{question.answer}</answer>" in mine
        for chain in question.evidence:
            assert oracle_subtask(question, chain) in mine  # the subtask names its entity and the question
            theirs = _assistant_text(tokenizer, next(subs))
            assert f'"query": "{chain.subject}"' in theirs and f'"url": "{chain.urls[0]}"' in theirs
            result = json.loads(theirs.rsplit("<answer>", 1)[1].split("</answer>", 1)[0])
            assert result == {"findings": f"{chain.subject}: {chain.fact}.", "evidence": [chain.urls[0]]}
    # a budget too short for every subtask leaves no episode of M (never a truncated one)
    three = RolloutConfig(main=dataclasses.replace(RolloutConfig().main, max_turns=3))
    fit = sum(len(q.evidence) + 1 <= 3 for q in several)
    assert 0 < fit < len(several)
    assert len(oracle_demonstrations(several, tokenizer, tokenizer, TOOLS, three).main) == fit


def test_the_single_agent_reads_every_entitys_page_in_2k_plus_1_turns(tokenizer):
    compare = next(q for q in synthetic_web(TOOLS).splits["train"] if q.kind == "compare" and len(q.evidence) == 3)

    def episodes(max_turns: int) -> list:
        cfg = RolloutConfig(main=dataclasses.replace(RolloutConfig().main, max_turns=max_turns))
        return oracle_demonstrations([compare], tokenizer, None, TOOLS, cfg).main

    (episode,) = episodes(7)
    text = _assistant_text(tokenizer, episode)
    assert all(chain.urls[0] in text for chain in compare.evidence) and text.count('"search"') == 3
    assert f"<answer>{compare.answer}</answer>" in text
    assert episodes(6) == []  # 3 searches, 3 visits and the answer: one turn short, no episode


def test_a_difference_question_delegates_both_facts():
    tools = ToolsConfig(web_entities=300, web_difference_share=0.05)
    difference = next(q for q in synthetic_web(tools).splits["train"] if q.kind == "difference")
    tokenizer = load_tokenizer(resolve_model_dir("tiny:main"))
    demos = oracle_demonstrations([difference], tokenizer, tokenizer, tools, RolloutConfig())
    assert len(demos.main) == 1 and len(demos.sub) == 2
    mine = _assistant_text(tokenizer, demos.main[0])
    assert mine.count('"delegate"') == 2 and f"<answer>{difference.answer}</answer>" in mine


def test_a_turn_over_its_budget_is_cut_and_its_episode_not_kept(stage1, tokenizer):
    several = [q for q in synthetic_web(TOOLS).splits["train"] if q.kind == "compare"][:2]
    roomy = dataclasses.replace(RolloutConfig().main, max_turns=6)
    delegate_ids = len(tokenizer(oracle_subtask(several[0], several[0].evidence[0]))["input_ids"])
    tight = RolloutConfig(main=dataclasses.replace(roomy, max_new_tokens_per_turn=delegate_ids // 2))
    assert oracle_demonstrations(several, tokenizer, tokenizer, TOOLS, tight).main == []
    engine = OracleEngine(tokenizer, "main", stage1[:1])
    prompt = tokenizer.decode(
        tokenizer.apply_chat_template([{"role": "user", "content": stage1[0].question}], add_generation_prompt=True)
    )
    cut = engine._generation(prompt, SamplingParams(max_new_tokens=5))
    assert cut.finish_reason == "length" and len(cut.token_ids) == 5
    whole = engine._generation(prompt, SamplingParams(max_new_tokens=512))
    assert whole.finish_reason == "stop" and whole.token_ids[:5] == cut.token_ids


def test_warmup_questions_take_the_kinds_in_turn_and_never_a_chain():
    train = synthetic_web(TOOLS).splits["train"]
    picked = warmup_questions(train, WebWarmupConfig(questions=6, kinds=["lookup", "compare"]))
    assert [q.kind for q in picked] == ["lookup", "compare"] * 3
    lookups = warmup_questions(train, WebWarmupConfig(questions=5))
    assert lookups == [q for q in train if q.level == 1 and len(q.evidence) == 1][:5]  # the default, as before
    assert not warmup_questions(train, WebWarmupConfig(kinds=["difference"]))  # none without web_difference_share
    with pytest.raises(ValueError, match="warmup.kinds"):
        WebWarmupConfig(kinds=["chain"])
    with pytest.raises(ValueError, match="warmup.kinds"):
        WebWarmupConfig(kinds=[])
    with pytest.raises(ValueError, match="each once"):
        WebWarmupConfig(kinds=["lookup", "lookup"])
    # one kind running out: the others go on
    compares = [q for q in train if q.kind == "compare"]
    mixed = warmup_questions(train[:400], WebWarmupConfig(questions=1000, kinds=["compare", "lookup"]))
    assert [q.kind for q in mixed].count("compare") == sum(q.kind == "compare" for q in train[:400]) < len(compares)
    assert len(mixed) == sum(q.kind in ("compare", "lookup") for q in train[:400])
