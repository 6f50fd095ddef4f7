"""Tiny seeded Llama- or Qwen2-style models with a locally trained BPE tokenizer, for tests, CPU smoke runs
and `mgrpo bench grpo` (preset "grpo": the bench's stated Qwen2-style shape), and the "web" presets: models of a
few million parameters whose tokenizer also learned the synthetic web's pages, meant to be pretrained on the web
by the warm-up (`warmup.pages`, deploy/configs/compare-web-tiny.yaml) before RL, where SmolLM2 is too slow.

Nothing is downloaded: the tokenizer is trained with `tokenizers` on a built-in corpus of the chat and
tool-call formats plus generic English, given a ChatML chat template (roles system/user/assistant/tool),
and saved next to a randomly initialised `LlamaForCausalLM` or `Qwen2ForCausalLM` (Llama's blocks plus
biases on the query, key and value projections). It is reloaded with
`PreTrainedTokenizerFast` (never `AutoTokenizer`, which may pick another class and change ids).
Builds are cached (see cache.py) under a key that changes with the config, the recipe (corpus, template)
and the library versions.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

import tokenizers
import torch
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from mgrpo_actors.log import get_logger
from mgrpo_actors.models.cache import build_once, cache_root

__all__ = [
    "CHAT_TEMPLATE",
    "FORMAT_TOKENS",
    "SPECIAL_TOKENS",
    "TINY_PRESETS",
    "TOKENIZER_WEB_SEEDS",
    "TinyModelConfig",
    "build_tiny",
    "tiny_model_dir",
    "train_tokenizer",
]

log = get_logger("mgrpo.models.tiny")

# Bump when the corpus, the template or the build recipe changes: it is part of the cache key.
_RECIPE_VERSION = 1

PAD_TOKEN = "<|endoftext|>"
BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"  # end of a turn: what an assistant generation stops on
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN)
# The turn format's tags (docs/method.md): single ids that decode to themselves, not "special" (kept by decode).
FORMAT_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>")

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('unknown chat role: ' + message['role']) }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape and seed of one tiny model (its tokenizer is shared by all presets)."""

    name: str  # preset name, part of the cache directory name
    seed: int  # seeds the weight initialisation
    hidden_size: int = 64  # model width
    intermediate_size: int = 128  # MLP width
    num_hidden_layers: int = 2  # transformer blocks
    num_attention_heads: int = 4  # query heads
    num_key_value_heads: int = 2  # key/value heads (grouped-query attention)
    max_position_embeddings: int = 2048  # longest context
    # Far above HF's 0.02 so next-token distributions are peaked rather than uniform: top-k/top-p then
    # cut something, and stop tokens get sampled at realistic rates.
    initializer_range: float = 0.3
    # BPE target size (the corpus may yield slightly fewer), special tokens included; the format tags come on top
    vocab_size: int = 1024
    architecture: Literal["llama", "qwen2"] = "llama"  # the HF model class: LlamaForCausalLM or Qwen2ForCausalLM
    # the tokenizer's training text: "chat" (the built-in chat and tool-call corpus) or "synthetic-web" (that and the
    # pages of 16 synthetic webs no run uses, TOKENIZER_WEB_SEEDS, so page phrases take few ids in every web)
    corpus: Literal["chat", "synthetic-web"] = "chat"


# Distinct models for the main agent and the sub-agent, as in a real vertical system.
TINY_PRESETS: dict[str, TinyModelConfig] = {
    "main": TinyModelConfig(name="main", seed=0),
    "sub": TinyModelConfig(
        name="sub", seed=1, hidden_size=48, intermediate_size=96, num_attention_heads=4, num_key_value_heads=4
    ),
    # `mgrpo bench grpo`'s stated configuration: Qwen2-style, hidden 128, 4 layers, 4 heads, intermediate 384, BPE 512.
    "grpo": TinyModelConfig(
        name="grpo",
        seed=2,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=512,
        architecture="qwen2",
    ),
    # Head dims 32 and 64 (main's and sub's are 16 and 12): sizes FlashAttention and vLLM's CPU attention take, for
    # the vllm engine's tests (tests/vllm/) and the first GPU check (deploy/gpu/check.sh).
    "main32": TinyModelConfig(name="main32", seed=3, hidden_size=128, intermediate_size=256),
    "sub64": TinyModelConfig(
        name="sub64",
        seed=4,
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=2,
        num_key_value_heads=2,
        architecture="qwen2",
    ),
    # Two different LLMs for the web comparison (make compare): M a Llama, S a Qwen2, 2.6M parameters each,
    # sharing a 4k BPE of the web; HF's init range (0.02): they are trained from scratch, not sampled raw.
    "web-main": TinyModelConfig(
        name="web-main",
        seed=5,
        hidden_size=192,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=6,
        num_key_value_heads=6,
        initializer_range=0.02,
        vocab_size=4096,
        corpus="synthetic-web",
    ),
}
# S: M's shape as a Qwen2 (biases on the query, key and value projections) of its own seed
TINY_PRESETS["web-sub"] = replace(TINY_PRESETS["web-main"], name="web-sub", seed=6, architecture="qwen2")

_WORDS = (
    "the a an of to and in is was for on with as by at from that this it be are or which who what when where "
    "how city river country capital founded born wrote book company museum university year population north "
    "south east west first second largest oldest author painter scientist mountain island bridge language "
    "search visit reason page result answer question find evidence entity link title name date found not "
    "about more than two three one many people named called located near built after before during between"
).split()
_NAMES = ("Aldora", "Brevik", "Castellan", "Dunmore", "Elowen", "Farrow", "Galen", "Hestia", "Ivara", "Jorund")
_SYSTEM_PROMPTS = (
    "You are the main agent. Plan, delegate subtasks with tool calls, then answer.",
    "You are a research sub-agent. Use search and visit to complete the subtask.",
)


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 14))]
    words.insert(rng.randrange(len(words)), rng.choice(_NAMES))
    return " ".join(words).capitalize() + rng.choice((".", ".", "?", "!"))


def _tool_call(rng: random.Random) -> str:
    name = rng.choice(("search", "visit", "reason", "delegate"))
    argument = {"search": "query", "visit": "page", "reason": "problem", "delegate": "task"}[name]
    payload = {"name": name, "arguments": {argument: _sentence(rng)}}
    return f"<tool_call>{json.dumps(payload)}</tool_call>"


def _dialogue(rng: random.Random) -> str:
    turns = [("system", rng.choice(_SYSTEM_PROMPTS)), ("user", _sentence(rng))]
    for _ in range(rng.randint(1, 3)):
        turns.append(("assistant", f"<think>{_sentence(rng)}</think>{_tool_call(rng)}"))
        turns.append(("tool", " ".join(_sentence(rng) for _ in range(rng.randint(1, 3)))))
    turns.append(("assistant", f"<think>{_sentence(rng)}</think><answer>{rng.choice(_NAMES)}</answer>"))
    return "".join(f"{BOS_TOKEN}{role}\n{content}{EOS_TOKEN}\n" for role, content in turns)


def _corpus(num_dialogues: int = 400, num_paragraphs: int = 400) -> list[str]:
    rng = random.Random(1234)
    dialogues = [_dialogue(rng) for _ in range(num_dialogues)]
    paragraphs = [" ".join(_sentence(rng) for _ in range(rng.randint(2, 6))) for _ in range(num_paragraphs)]
    return dialogues + paragraphs


# The webs whose pages the web presets' tokenizer learns: 16 worlds that no run or warm-up uses (runs take seed 0 and
# the warm-up the next few). Trained on the run's own web, whole entity names of that web became single ids, seen by
# the model only where a train episode named them: M then could not copy a validation question's names and numbers
# (measured: docs/benchmarks.md). Over 16 other worlds no name is frequent enough to become one id, so every web,
# the run's included, splits its names into the same syllable pieces (about 4.5 ids a name in each).
TOKENIZER_WEB_SEEDS = tuple(range(1000, 1016))


@functools.cache  # every load of a web preset hashes them for its cache key: generate them once a process
def _web_pages() -> tuple[str, ...]:
    # imported here: only the web presets need the synthetic web (1,000 entities a world: the default tools section)
    from mgrpo_actors.envs.synthetic_web import build_synthetic_web, config_from_args

    webs = (build_synthetic_web(config_from_args(seed, 1000, 3000)) for seed in TOKENIZER_WEB_SEEDS)
    return tuple(page.text for web in webs for page in web.pages)


def train_tokenizer(vocab_size: int, corpus: Literal["chat", "synthetic-web"] = "chat") -> Tokenizer:
    """Byte-level BPE trained on the built-in corpus (and the synthetic web's pages for corpus "synthetic-web");
    special and format tokens are single ids."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = _corpus() + (list(_web_pages()) if corpus == "synthetic-web" else [])
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in FORMAT_TOKENS])
    return tokenizer


def _fast_tokenizer(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        chat_template=CHAT_TEMPLATE,
        # Prompts come from the chat template, which writes its own markers: add nothing on encode.
        add_bos_token=False,
        add_eos_token=False,
    )


def _model(cfg: TinyModelConfig, tokenizer: PreTrainedTokenizerFast) -> PreTrainedModel:
    config_class, model_class = (
        (Qwen2Config, Qwen2ForCausalLM) if cfg.architecture == "qwen2" else (LlamaConfig, LlamaForCausalLM)
    )
    config = config_class(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        initializer_range=cfg.initializer_range,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):  # seed the init without touching the caller's RNG stream
        torch.manual_seed(cfg.seed)
        model = model_class(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model


def build_tiny(cfg: TinyModelConfig, out_dir: Path) -> None:
    """Train the tokenizer, initialise the model and save both (safetensors) into `out_dir`."""
    tokenizer = _fast_tokenizer(train_tokenizer(cfg.vocab_size, cfg.corpus))
    model = _model(cfg, tokenizer)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def _cache_key(cfg: TinyModelConfig) -> str:
    # Library versions too: another tokenizers/transformers may train or initialise differently.
    versions = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__}
    shape = asdict(cfg)
    if shape["architecture"] == "llama":
        # the Llama presets keep the keys they had before Qwen2 came (cached builds stay valid)
        del shape["architecture"]
    if shape["corpus"] == "chat":  # and the chat-corpus ones those they had before the web presets
        del shape["corpus"]
    else:  # the tokenizer learnt the generated pages: another generator, another tokenizer
        shape["pages_sha256"] = hashlib.sha256("\n".join(_web_pages()).encode()).hexdigest()
    spec = json.dumps({"recipe": _RECIPE_VERSION, **versions, **shape}, sort_keys=True)
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


def tiny_model_dir(preset: str) -> Path:
    """The local HF directory of a tiny preset (a key of TINY_PRESETS), built on first use."""
    if preset not in TINY_PRESETS:
        raise ValueError(f"unknown tiny model preset {preset!r}: expected one of {', '.join(TINY_PRESETS)}")
    cfg = TINY_PRESETS[preset]
    target = cache_root() / f"tiny-{cfg.name}-{_cache_key(cfg)}"
    if not target.exists():
        log.info("tiny_model_build", preset=preset, path=str(target))
    return build_once(target, lambda tmp_dir: build_tiny(cfg, tmp_dir))
