"""Tiny models: locally trained tokenizer, chat template, distinct main/sub models, cached builds."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from mgrpo_actors.models.cache import build_once
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.models.tiny import FORMAT_TOKENS, SPECIAL_TOKENS, TINY_PRESETS, build_tiny, tiny_model_dir

TEXTS = [
    "<|im_start|>system\nYou are the main agent.<|im_end|>\n<|im_start|>user\nWho founded Aldora?<|im_end|>\n",
    '<think>Search first.</think><tool_call>{"name": "search", "arguments": {"query": "Brevik bridge"}}</tool_call>',
    "<answer>Castellan</answer>",
    "Unseen words: zebra quixotic 1987, naïve café — 東京 🙂\n\n  indented\ttab",
    "",
]


@pytest.fixture(scope="module")
def main_dir() -> Path:
    return tiny_model_dir("main")


def test_tokenizer_reloaded_with_fast_class_gives_identical_ids(main_dir: Path):
    raw = Tokenizer.from_file(str(main_dir / "tokenizer.json"))
    reloaded = PreTrainedTokenizerFast.from_pretrained(main_dir)
    for text in TEXTS:
        raw_ids = raw.encode(text, add_special_tokens=False).ids
        assert reloaded(text, add_special_tokens=False)["input_ids"] == raw_ids
        assert reloaded.decode(raw_ids) == text  # byte-level BPE round-trips any text


def test_special_and_format_tokens_are_single_ids_that_decode_to_themselves(main_dir: Path):
    tokenizer = PreTrainedTokenizerFast.from_pretrained(main_dir)
    for tag in (*SPECIAL_TOKENS, *FORMAT_TOKENS):
        ids = tokenizer(tag, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, tag
        assert tokenizer.decode(ids) == tag
    assert len({tokenizer.convert_tokens_to_ids(tag) for tag in (*SPECIAL_TOKENS, *FORMAT_TOKENS)}) == 9
    assert tokenizer("<think>x</think>", add_special_tokens=False)["input_ids"][0] == tokenizer.convert_tokens_to_ids(
        "<think>"
    )


def test_chat_template_renders_the_four_roles_chatml_style(main_dir: Path):
    tokenizer = PreTrainedTokenizerFast.from_pretrained(main_dir)
    messages = [{"role": role, "content": role.upper()} for role in ("system", "user", "assistant", "tool")]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nSYSTEM<|im_end|>\n<|im_start|>user\nUSER<|im_end|>\n"
        "<|im_start|>assistant\nASSISTANT<|im_end|>\n<|im_start|>tool\nTOOL<|im_end|>\n<|im_start|>assistant\n"
    )
    with pytest.raises(Exception, match="unknown chat role: critic"):
        tokenizer.apply_chat_template([{"role": "critic", "content": "x"}], tokenize=False)


def test_main_and_sub_are_distinct_models_sharing_a_tokenizer():
    main_model, main_tokenizer = load_model("tiny:main")
    sub_model, sub_tokenizer = load_model("tiny:sub")
    assert main_model.config.hidden_size != sub_model.config.hidden_size
    assert tiny_model_dir("main") != tiny_model_dir("sub")
    assert main_tokenizer.get_vocab() == sub_tokenizer.get_vocab()
    end_of_turn = main_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert main_model.config.eos_token_id == main_tokenizer.eos_token_id == end_of_turn


def test_build_is_reproducible(main_dir: Path, tmp_path: Path):
    build_tiny(TINY_PRESETS["main"], tmp_path)
    assert (tmp_path / "tokenizer.json").read_text() == (main_dir / "tokenizer.json").read_text()
    fresh, cached = load_file(tmp_path / "model.safetensors"), load_file(main_dir / "model.safetensors")
    assert fresh.keys() == cached.keys()
    for name in fresh:
        torch.testing.assert_close(fresh[name], cached[name], rtol=0, atol=0)


def test_build_once_builds_a_directory_once_and_never_exposes_a_partial_one(tmp_path: Path):
    calls = []

    def build(out_dir: Path) -> None:
        calls.append(out_dir)
        (out_dir / "weights").write_text("w")

    target = tmp_path / "model"
    assert build_once(target, build) == target
    assert build_once(target, build) == target
    assert len(calls) == 1 and (target / "weights").read_text() == "w"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary directory left behind

    def failing(out_dir: Path) -> None:
        (out_dir / "half").write_text("h")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        build_once(tmp_path / "other", failing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_the_web_presets_are_two_families_whose_tokenizer_learnt_the_web():
    from mgrpo_actors.envs.synthetic_web import build_synthetic_web, config_from_args

    main_model, main_tokenizer = load_model("tiny:web-main")
    sub_model, sub_tokenizer = load_model("tiny:web-sub")
    assert type(main_model).__name__ == "LlamaForCausalLM" and type(sub_model).__name__ == "Qwen2ForCausalLM"
    assert main_tokenizer.get_vocab() == sub_tokenizer.get_vocab()
    chat_tokenizer = load_model("tiny:main")[1]
    page = build_synthetic_web(config_from_args(0, 1000, 3000)).pages[7].text
    web_ids, chat_ids = main_tokenizer(page)["input_ids"], chat_tokenizer(page)["input_ids"]
    assert main_tokenizer.decode(web_ids) == page and len(web_ids) < 0.7 * len(chat_ids)
    for token in (*SPECIAL_TOKENS, *FORMAT_TOKENS):  # the turn format's ids, as in every preset
        assert len(main_tokenizer(token, add_special_tokens=False)["input_ids"]) == 1
    assert 2e6 < sum(p.numel() for p in main_model.parameters()) < 4e6


def test_the_web_tokenizer_splits_the_run_s_web_as_any_other_web():
    # It learnt webs no run uses: the run's own names must not be whole ids that only its episodes train (the
    # models then could not copy them), and they take as many pieces as another world's names.
    from mgrpo_actors.envs.synthetic_web import build_synthetic_web, config_from_args

    tokenizer = load_model("tiny:web-main")[1]

    def name_ids(seed: int) -> list[int]:
        questions = build_synthetic_web(config_from_args(seed, 1000, 3000)).splits["validation"][:200]
        return [len(tokenizer(" " + q.evidence[0].subject)["input_ids"]) for q in questions]

    run_web, other_web = name_ids(0), name_ids(3)
    assert min(run_web) > 1
    assert abs(sum(run_web) / len(run_web) - sum(other_web) / len(other_web)) < 0.5
