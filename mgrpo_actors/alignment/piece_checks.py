"""What an aligner checks of every piece of a step before the piece may count: that the step's plan asked for
it and that it is one the run's agents could have sent (docs/architecture.md §One training step, step 5). A piece
that fails is dead-lettered with the reason and counted (`refused` in the side's batch metrics), never aligned
and never trained on (actors/aligner.py `admit`).

- Every piece: its run is the plan's, its query is one of the plan's B queries and its rollout one of K.
- A trajectory: token arrays of one length with the prompt inside them, a policy version >= 0 (a failed one: no
  tokens); M's scores in
  [0, 1] and no call id; S's call id is one M's attempt made for that rollout (main call ids are
  "<attempt>.r<k>.t<n>", rollout/subtasks.py), and S's attempt is that call's.
- RewardStats: scores in [0, 1], as many call ids as it counts calls, none twice, each one of its own attempt's
  calls for its rollout.
- A sub trajectory against the RewardStats whose calls name it: the same query, rollout and attempt.

The attempts are random (rollout/main.py new_attempt), so a call id cannot be guessed before M makes the call:
with per-run credentials (runtime/run_credentials.py) and each role's publish permissions (deploy/access.py), a
piece that passes these checks and arrived first is the agent's own, and the first-wins rule of
alignment/holding.py cannot be turned against the real one.
"""

from __future__ import annotations

from protocols import RewardStats, StepPlan, Trajectory

__all__ = ["named_reason", "plan_reason", "stats_reason", "trajectory_reason"]


def plan_reason(plan: StepPlan, piece: Trajectory | RewardStats) -> str | None:
    """Why `piece` is not one `plan` asked for, or None."""
    if piece.run_id != plan.run_id:
        return f"of run {piece.run_id!r}, not {plan.run_id!r}"
    if piece.query_id not in plan.query_ids:
        return f"query {piece.query_id!r} is not one of step {plan.step}'s plan"
    if not 0 <= piece.rollout_index < plan.num_rollouts:
        return f"rollout {piece.rollout_index} where step {plan.step}'s plan has K = {plan.num_rollouts}"
    return None


def trajectory_reason(trajectory: Trajectory) -> str | None:
    """Why `trajectory` is not one an agent of its side could have published, or None."""
    t = trajectory
    if t.failed:  # rollout/wire.py failed_trajectory: no tokens, version -1, weight 0 wherever it goes
        if len(t.token_ids) or len(t.loss_mask) or len(t.logprobs):
            return f"a failed trajectory with {len(t.token_ids)} tokens"
    elif t.policy_version < 0:
        return f"policy version {t.policy_version}"
    n = len(t.token_ids)
    if len(t.loss_mask) != n or len(t.logprobs) != n:
        return f"{n} token ids but {len(t.loss_mask)} mask and {len(t.logprobs)} logprob entries"
    if not 0 <= t.prompt_len <= n:
        return f"prompt of {t.prompt_len} tokens in a trajectory of {n}"
    if t.side == "main":
        if t.call_id:
            return f"a main trajectory with call id {t.call_id!r}"
        return _scores_reason(t.r_format, t.r_correct)
    return _call_reason(t.call_id, t.attempt, t.rollout_index)


def stats_reason(stats: RewardStats) -> str | None:
    """Why `stats` is not what a main agent reports of a rollout, or None."""
    if stats.num_sub_calls != len(stats.sub_call_ids):
        return f"{stats.num_sub_calls} sub calls counted but {len(stats.sub_call_ids)} named"
    if len(set(stats.sub_call_ids)) != len(stats.sub_call_ids):
        return "a sub call named twice"
    for call in stats.sub_call_ids:  # M's calls of this attempt's rollout (a retried call's id keeps them)
        if (reason := _call_reason(call, stats.attempt, stats.rollout_index)) is not None:
            return reason
    return _scores_reason(stats.r_format, stats.r_correct)


def named_reason(trajectory: Trajectory, stats: RewardStats) -> str | None:
    """Why the sub trajectory that `stats` names does not belong to that rollout, or None."""
    t, s = trajectory, stats
    if (t.query_id, t.rollout_index, t.attempt) != (s.query_id, s.rollout_index, s.attempt):
        return (
            f"call {t.call_id!r} claims query {t.query_id!r} rollout {t.rollout_index} attempt {t.attempt!r}; "
            f"the rollout that made it is query {s.query_id!r} rollout {s.rollout_index} attempt {s.attempt!r}"
        )
    return None


def _scores_reason(r_format: float, r_correct: float) -> str | None:
    for name, value in (("r_format", r_format), ("r_correct", r_correct)):
        if not 0.0 <= value <= 1.0:  # the judges' scores (docs/method.md §Rewards)
            return f"{name} {value:g} outside [0, 1]"
    return None


def _call_reason(call_id: str, attempt: str, rollout_index: int) -> str | None:
    parts = call_id.split(".")
    if len(parts) < 3 or not parts[0]:
        return f"call id {call_id!r} is not one a main agent makes (<attempt>.r<k>.t<n>)"
    if parts[0] != attempt:
        return f"call id {call_id!r} is of attempt {parts[0]!r}, the trajectory says {attempt!r}"
    if parts[1] != f"r{rollout_index}":
        return f"call id {call_id!r} is not of rollout {rollout_index}"
    return None
