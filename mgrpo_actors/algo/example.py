"""Worked example of the M-GRPO math, quoted by docs/m-grpo-worked-example.md.

One query, K = 3 rollouts in which M calls S 0, 2 and 5 times, aligned to D = 2 (and, to show
duplication, to D = 3). Call ids repeat across rollouts ("t0" in rollouts 1 and 2), as the rollout
code's do; the alignment plan keys them by (query, rollout, call id). Run:
`python -m mgrpo_actors.algo.example`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mgrpo_actors.algo.advantages import group_statistics, main_advantages, sub_advantages
from mgrpo_actors.algo.alignment import AlignmentPlan, SlotKind, SubKey, align
from mgrpo_actors.algo.config import AdvantageConfig, RewardConfig
from mgrpo_actors.algo.format_check import trajectory_format_ok
from mgrpo_actors.algo.rewards import main_correct_for_sub, main_reward, resolve_sub_weights, sub_reward
from mgrpo_actors.algo.scorers import ContainsReferenceJudge, ExactMatchJudge, subtask_text

QUESTION = "In which city was the founder of Vantorine Labs born?"
GOLD = "Castor Bay"
# What r_expert looks for in S's results: the evidence entities the question does not name.
EXPERT_REFERENCES = ("Orlen Vasque", "Castor Bay")
SEED = 7


@dataclass(frozen=True)
class SubCall:
    """One S invocation as the sub side sees it once the rollout is over."""

    # Unique within its rollout only, like the rollout code's call ids.
    id: str
    subtask: str
    result: str
    # Per-turn parse results from the agent's turn parser: None = valid turn.
    turn_errors: tuple[str | None, ...]


@dataclass(frozen=True)
class Rollout:
    answer: str
    turn_errors: tuple[str | None, ...]
    calls: tuple[SubCall, ...]


ROLLOUTS = (
    # k = 0: M answers from memory without delegating, and is wrong.
    Rollout(answer="Meridian", turn_errors=(None,), calls=()),
    # k = 1: two well-aimed subtasks, right answer.
    Rollout(
        answer="Castor Bay",
        turn_errors=(None, None, None),
        calls=(
            SubCall(
                "t0", "Who founded Vantorine Labs?", "Vantorine Labs was founded by Orlen Vasque.", (None, None, None)
            ),
            SubCall("t1", "Where was Orlen Vasque born?", "Orlen Vasque was born in Castor Bay.", (None, None)),
        ),
    ),
    # k = 2: five subtasks, two that only echo their task, one badly formatted; right answer (normalised match).
    Rollout(
        answer="castor bay.",
        turn_errors=(None,) * 6,
        calls=(
            SubCall("t0", "Who founded Vantorine Labs?", "Founder: Orlen Vasque.", (None, None)),
            SubCall(
                "t1",
                "Where was Orlen Vasque born?",
                "I could not find where Orlen Vasque was born.",
                (None, None, None),
            ),
            SubCall("t2", "Search Orlen Vasque biography", "", (None, "tool_call is not valid JSON")),
            SubCall(
                "t3", "Which town did Orlen Vasque grow up in?", "He was born and raised in Castor Bay.", (None, None)
            ),
            SubCall("t4", "Is Castor Bay a city?", "Yes, Castor Bay is a port city.", (None,)),
        ),
    ),
)


def _num(value: float) -> str:
    return f"{value:+.3f}"


def _r_expert(call: SubCall) -> float:
    """Best local-rule score over the expert references; S's subtask (task, no context here) earns nothing."""
    judge = ContainsReferenceJudge()
    return max(judge.score(subtask_text(call.subtask, ""), call.result, ref).score for ref in EXPERT_REFERENCES)


def _sub_rewards(reward_cfg: RewardConfig, main_correct: np.ndarray) -> tuple[dict[SubKey, float], list[str]]:
    """R_S for every sub call, keyed (query 0, rollout k, call id), and the table lines that show how."""
    weights = resolve_sub_weights(reward_cfg, expert_configured=True)
    rewards: dict[SubKey, float] = {}
    lines = [f"  {'k':>1} {'id':<3}  {'format':<7} {'r_correct(M)':>12} {'r_expert':>8} {'R_S':>6}  subtask -> result"]
    for k, rollout in enumerate(ROLLOUTS):
        for call in rollout.calls:
            ok, _ = trajectory_format_ok(call.turn_errors, ended_with_answer=True)
            expert = _r_expert(call)
            reward = rewards[(0, k, call.id)] = float(sub_reward(ok, main_correct[k], expert, weights))
            lines.append(
                f"  {k:>1} {call.id:<3}  {'ok' if ok else 'bad':<7} {main_correct[k]:>12.3f} {expert:>8.3f} "
                f"{reward:>6.3f}  {call.subtask} -> {call.result or '(nothing)'}"
            )
    return rewards, lines


def _aligned_lines(aligned: AlignmentPlan, rewards: np.ndarray, advantages: np.ndarray) -> list[str]:
    lines = [f"  {'k':>1} {'slot':>4}  {'source':<6} {'kind':<11} {'weight':>6} {'R_S':>6} {'A_S':>7}"]
    for slot in aligned.slots():
        reward = "-" if slot.kind == SlotKind.PLACEHOLDER else f"{rewards[0, slot.rollout, slot.index]:.3f}"
        lines.append(
            f"  {slot.rollout:>1} {slot.index:>4}  {slot.call_id or '-':<6} {slot.kind.name.lower():<11} "
            f"{slot.weight:>6.0f} {reward:>6} {_num(advantages[0, slot.rollout, slot.index]):>7}"
        )
    for k, dropped in enumerate(aligned.dropped[0]):
        if dropped:
            lines.append(f"  dropped from rollout {k}: {', '.join(call for _, _, call in dropped)}")
    s = aligned.summary()
    lines.append(
        f"  B·K·D = 1·{aligned.k}·{aligned.d} = {s['samples']} samples: {s['original']} original, "
        f"{s['duplicate']} duplicate, {s['placeholder']} placeholder; {s['dropped']} dropped"
    )
    return lines


def _sub_section(d: int, sub_rewards: dict[SubKey, float], adv_cfg: AdvantageConfig) -> list[str]:
    aligned = align([[[c.id for c in r.calls] for r in ROLLOUTS]], d=d, rng=np.random.default_rng(SEED))
    rewards = aligned.gather(sub_rewards)
    advantages = sub_advantages(rewards, aligned.weight, adv_cfg)
    counted = aligned.weight.reshape(1, -1) > 0
    stats = group_statistics(rewards.reshape(1, -1), counted, adv_cfg)
    return [
        f"Aligned sub batch, D = {d}, mode duplicate, numpy seed {SEED} (§Trajectory alignment)",
        f"and A_S over the {int(stats.count[0])} counted slots of the D·K = {aligned.num_samples} "
        f"(mean {stats.mean[0]:.3f}, population std {stats.std[0]:.3f}; placeholders get 0)",
        *_aligned_lines(aligned, rewards, advantages),
    ]


def render() -> str:
    """The whole worked example as text."""
    reward_cfg, adv_cfg = RewardConfig(), AdvantageConfig()
    correctness = ExactMatchJudge()
    main_checks = [trajectory_format_ok(r.turn_errors, ended_with_answer=True) for r in ROLLOUTS]
    main_correct = [correctness.score(QUESTION, r.answer, GOLD).score for r in ROLLOUTS]
    r_main = main_reward([c.ok for c in main_checks], main_correct, reward_cfg)
    a_main = main_advantages(r_main[None, :], adv_cfg)[0]
    main_stats = group_statistics(r_main[None, :], np.ones((1, len(ROLLOUTS)), dtype=bool), adv_cfg)
    # §Rewards: R_S uses M's r_correct only where M's format is valid.
    sub_main_correct = main_correct_for_sub([c.ok for c in main_checks], main_correct)
    sub_rewards, sub_lines = _sub_rewards(reward_cfg, sub_main_correct)

    lines = [
        f"Question: {QUESTION}  Gold: {GOLD}",
        "",
        "Main rewards R_M = 0.1·r_format + 0.9·r_correct (exact match after normalising) (§Rewards)",
        f"and A_M over the K = {len(ROLLOUTS)} rollouts (mean {main_stats.mean[0]:.3f}, "
        f"population std {main_stats.std[0]:.3f}) (§Group-relative advantages)",
        f"  {'k':>1} {'d_k':>3}  {'answer':<12} {'format':<7} {'r_correct':>9} {'R_M':>6} {'A_M':>7}",
    ]
    for k, rollout in enumerate(ROLLOUTS):
        lines.append(
            f"  {k:>1} {len(rollout.calls):>3}  {rollout.answer:<12} {'ok' if main_checks[k].ok else 'bad':<7} "
            f"{main_correct[k]:>9.3f} {r_main[k]:>6.3f} {_num(a_main[k]):>7}"
        )
    lines += [
        "",
        "Sub rewards R_S = 0.1·r_format(S) + 0.4·r_correct(M) + 0.5·r_expert, 0 if S's format is bad (§Rewards)",
        f"r_expert: does S's result contain an evidence entity ({', '.join(EXPERT_REFERENCES)}) that its",
        "subtask does not already name (local rule judge); r_correct(M) is 0 where M's format is bad",
        *sub_lines,
        "",
        *_sub_section(2, sub_rewards, adv_cfg),
        "",
        *_sub_section(3, sub_rewards, adv_cfg),
    ]
    return "\n".join(lines)


def main() -> None:
    print(render())


if __name__ == "__main__":
    main()
