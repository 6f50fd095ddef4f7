"""The `warmup` section: the optional supervised format warm-up (stage 0) that `mgrpo run` does, or reuses
from the model cache, before RL starts (mgrpo_actors/warmup/cached.py), and `mgrpo warmup` does on demand
(mgrpo_actors/warmup/web.py). Off unless `steps` > 0.

It fine-tunes each agent on the oracle's worked episodes of train questions of the built-in web
(docs/method.md §Training schedule, stage 0): the turn format and the tool protocol, with the gold answers of
the train questions it shows. It is documented as a warm-up, never counted as RL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mgrpo_actors.config.dtypes import resolve_dtype

__all__ = ["WARMUP_KINDS", "WebWarmupConfig"]

# The question kinds whose every fact is on a named entity's own page: what the oracle can work (warmup/oracle.py).
WARMUP_KINDS = ("lookup", "compare", "aggregate", "difference")


@dataclass(frozen=True)
class WebWarmupConfig:
    """Stage 0, before RL ([ours]: sized for SmolLM2-135M on 2 CPU cores, about a minute per agent and step)."""

    steps: int = 0
    """optimizer steps per agent; 0 = no warm-up in `mgrpo run` (`mgrpo warmup` then takes 8). Measured on SmolLM2 at lr
    2e-5: 1 step left M's format valid in 0.75 of its rollouts, 3 steps in all of them (make run: 4 at lr 1e-4)"""
    sub_steps: int = 0
    """S's optimizer steps where they differ from `steps` (0 = `steps`): a sub-agent's task (search, visit, report) is
    learnt in fewer steps than M's, and an S with something left to learn is what RL can improve (make
    compare). Must exceed lr_ramp_steps; the single agent and M take `steps`"""
    questions: int = 48
    """train questions the oracle works through (one episode each for M, and for S one per subtask)"""
    kinds: list[str] = field(default_factory=lambda: ["lookup"])
    """question kinds they are drawn from, in turn: lookup (one fact: the turn format and the tool protocol), compare,
    aggregate, difference (several named entities: one delegated subtask each, then the answer; agents.main.max_turns
    must exceed the entities, up to 5, the single agent's 2 x entities, and their turns take about 100 tokens:
    max_new_tokens_per_turn; episodes over a budget are not kept). Chains of hops are never worked (warmup/oracle.py)"""
    batch_size: int = 4
    """episodes per step (token-mean loss over them)"""
    lr: float = 2e-5
    """AdamW learning rate (a pretrained model: small; the tiny models' demo uses 3e-3)"""
    seed: int = 0
    """seeds the episode draws"""
    worlds: int = 1
    """synthetic webs whose train questions the oracle works: the run's (tools.web_seed), then worlds - 1 others (the
    next web seeds: other names, facts and questions). Measured on tiny:web-main trained from scratch on the run's web
    alone: its loss on those episodes fell to 0.0004 while with S it answered 3-4 % of validation questions (it had
    learnt the train answers by heart rather than to read them from its tools); other worlds give it episodes it
    cannot learn by heart"""
    all_tokens: bool = False
    """learn every token of the other worlds' episodes (their prompts and tool outputs too), as a pretraining does:
    search results and pages repeat the names and numbers an agent has to copy. The run's own episodes keep the
    agent's tokens only, so nothing of the run's pages is learnt (they hold the facts of its validation questions)"""
    pages: float = 0.0
    """share of each step's samples that are pages of the other worlds (warmup.worlds >= 2), learnt on every token:
    for a model pretrained here from scratch (the tiny:web-* presets); never the run's own pages; 0 = none"""
    final_turns: float = 0.0
    """share of each step's samples that are the other worlds' episodes (warmup.worlds >= 2) learnt on the agent's
    last turn only: M's answer after S's findings, S's report after the page, where the agent copies what it read.
    Measured on tiny:web-main: learnt among every other token, the answer's few tokens weigh little and M did not copy
    (0 of 40 teacher-forced answers right); 1,200 steps of 32 on the last turns alone brought it to 25 of 40
    (docs/benchmarks.md). They share each step's token-mean loss with the other samples; 0 = none"""
    copy_steps: int = 0
    """steps of copying practice before each agent's own `steps` (and `sub_steps`): each sample the id the episodes open
    with, then a run of 4-16 of the agent's ids written four times, learnt on the repeats (warmup/copying.py). Meant
    for a model trained from scratch: the names it carries from question to delegation, from results to visit, from
    page to report are new in every world, and tiny:web-main's warm start of the first compare run, 600 steps without
    this practice, predicted 0.2 % of held-out repeated ids (copied_share). Measured on compare-web-tiny (1500 steps,
    copies 0.1): copied_share rose to 16 % (M) but the start's format valid rate fell from 0.60 to 0.14, so it is off
    by default (docs/benchmarks.md). The lr ramp (`lr_ramp_steps`) counts from the first practice step, the practice
    runs at the full lr, and `lr_decay` spans only the steps after it. 0 = none"""
    copies: float = 0.0
    """share of each later step's samples that are copying practice as in `copy_steps`, meant to keep what those steps
    taught while the episodes are learnt; 0 = none"""
    micro_batch: int = 1
    """samples per forward pass, right-padded, a step's samples sorted by length first (with batch_size a multiple of
    it, like lengths share a pass); 1 = one pass each (SmolLM2's long episodes and 49k vocabulary)"""
    lr_ramp_steps: int = 0
    """the lr rises linearly over the first N steps (0 = none; a model trained from scratch needs one)"""
    lr_decay: bool = False
    """after the ramp the lr falls linearly to a tenth of `lr` by the last step"""
    max_grad_norm: float = 0.0
    """clip each step's gradient norm to this; 0 = no clipping"""
    dtype: Literal["auto", "float32", "bfloat16"] = "float32"
    """the matrix products' precision (autocast; the weights and AdamW stay fp32): auto = bf16 where the host
    computes it natively (mgrpo_actors/config/dtypes.py)"""
    checkpoint_seconds: float = 300.0
    """a warm-up built in the model cache (`mgrpo run`'s warm start, `mgrpo warmup --reuse`) saves its state at most
    this often, and a side it finished at once, so an interrupted build resumes where it was, to the same weights
    bit for bit (warmup/checkpoint.py); 0 = never saved. Not part of the cache key: how often it saves does not
    change what it builds"""

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"warmup.steps must be >= 0 (0 = no warm-up), got {self.steps}")
        if self.questions < 1 or self.batch_size < 1 or not self.lr > 0:
            raise ValueError(f"warm-up needs questions >= 1, batch_size >= 1 and lr > 0, got {self}")
        if self.seed < 0:  # numpy's generators (warmup/copying.py) take non-negative seeds only
            raise ValueError(f"warmup.seed must be >= 0, got {self.seed}")
        if self.worlds < 1:
            raise ValueError(f"warmup.worlds must be >= 1 (the run's own web first), got {self.worlds}")
        if self.pages and self.worlds < 2:
            raise ValueError("warmup.pages are the other worlds' pages (never the run's own): set warmup.worlds >= 2")
        if self.final_turns and self.worlds < 2:
            raise ValueError("warmup.final_turns are the other worlds' episodes: set warmup.worlds >= 2")
        if not 0 <= self.pages < 1 or self.micro_batch < 1 or self.lr_ramp_steps < 0 or not self.max_grad_norm >= 0:
            raise ValueError(
                "warm-up needs 0 <= pages < 1, micro_batch >= 1, lr_ramp_steps >= 0 and max_grad_norm >= 0, "
                f"got pages {self.pages}, micro_batch {self.micro_batch}, lr_ramp_steps {self.lr_ramp_steps}, "
                f"max_grad_norm {self.max_grad_norm}"
            )
        if (
            not 0 <= self.final_turns < 1
            or not 0 <= self.copies < 1
            or self.pages + self.final_turns + self.copies >= 1
        ):
            raise ValueError(
                "warm-up needs 0 <= final_turns < 1, 0 <= copies < 1 and pages + final_turns + copies < 1 (the rest "
                f"are whole episodes), got final_turns {self.final_turns}, copies {self.copies}, pages {self.pages}"
            )
        if self.copy_steps < 0:
            raise ValueError(f"warmup.copy_steps must be >= 0 (0 = none), got {self.copy_steps}")
        if self.sub_steps < 0 or (self.sub_steps and self.sub_steps <= self.lr_ramp_steps):
            raise ValueError(
                f"warmup.sub_steps must be 0 (= steps) or above lr_ramp_steps ({self.lr_ramp_steps}), "
                f"got {self.sub_steps}"
            )
        if not self.checkpoint_seconds >= 0:
            raise ValueError(f"warmup.checkpoint_seconds must be >= 0 (0 = never saved), got {self.checkpoint_seconds}")
        unknown = sorted(set(self.kinds) - set(WARMUP_KINDS))
        if not self.kinds or unknown or len(set(self.kinds)) < len(self.kinds):
            raise ValueError(f"warmup.kinds must name some of {', '.join(WARMUP_KINDS)}, each once, got {self.kinds}")
        object.__setattr__(self, "dtype", resolve_dtype(self.dtype, "cpu"))

    def steps_of(self, side: str) -> int:
        """The optimizer steps the warm-up gives `side` (main or sub), its copying practice's included."""
        return self.copy_steps + (self.sub_steps if side == "sub" and self.sub_steps else self.steps)

    def steps_said(self, kind: str = "", with_sub: bool = True) -> str:
        """The steps in words: "1200 steps", or "1200 steps (S 300)" where S (`with_sub`: the layout has one) takes
        its own, with " after 100 of copying" where copy_steps are taken first; `kind` goes before "steps"
        ("supervised ")."""
        count = f"{self.steps} {kind}step{'' if self.steps == 1 else 's'}"
        count = f"{count} (S {self.sub_steps})" if with_sub and self.sub_steps else count
        return f"{count} after {self.copy_steps} of copying" if self.copy_steps else count

    def learns_from(self) -> str:
        """What the warm-up learns from, in words, e.g. "oracle episodes of up to 2000 train questions (lookup,
        compare) of each of 8 worlds, every token of the other worlds', the other worlds' pages for 20% of the samples,
        the other worlds' episodes learnt on their last turn alone for 50% of the samples"."""
        worlds = f" of each of {self.worlds} worlds" if self.worlds > 1 else ""
        tokens = ", every token of the other worlds'" if self.all_tokens else ""
        pages = f", the other worlds' pages for {self.pages:.0%} of the samples" if self.pages else ""
        finals = (
            f", the other worlds' episodes learnt on their last turn alone for {self.final_turns:.0%} of the samples"
            if self.final_turns
            else ""
        )
        copies = f", copying practice for {self.copies:.0%} of the samples" if self.copies else ""
        kinds = ", ".join(self.kinds)
        said = f"oracle episodes of up to {self.questions} train questions ({kinds}){worlds}{tokens}{pages}{finals}"
        return said + copies
