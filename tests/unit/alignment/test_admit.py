"""Which copy of a sub call counts, whatever order the pieces come in (actors/aligner.py `admit`,
actors/sub_aligner.py `after_keep`): a forged copy of a real call that claims another query is refused once the
stats naming the call are there, and the real copy is kept, whether it came before or after the forged one."""

import itertools

import numpy as np
import pytest

from actors.aligner import AlignerActor
from actors.sub_aligner import SubAlignerActor
from mgrpo_actors.alignment.holding import HeldStep
from mgrpo_actors.alignment.sub import failed_and_lost, sub_complete
from protocols import RewardStats, StepPlan, Trajectory

ATTEMPT = "aaaaaaaaaaaa"
CALL = f"{ATTEMPT}.r0.t1"
PLAN = StepPlan(run_id="r", step=0, query_ids=["q0", "q1"], num_rollouts=1, main_version=0, sub_versions={"sub": 0})


class Aligner:
    """The sub aligner's checks with the bus left out: refusals are noted instead of dead-lettered."""

    side = "sub"

    def __init__(self) -> None:
        self.refused: list[tuple[str, str]] = []

    piece_reason = SubAlignerActor.piece_reason
    after_keep = SubAlignerActor.after_keep
    admit = AlignerActor.admit

    def refuse(self, held, delivery, piece, reason):  # noqa: ANN001, ANN201
        held.count("refused")
        self.refused.append((delivery, reason))


def trajectory(query: str) -> Trajectory:
    mask = np.array([0, 0, 0, 1, 1, 1], np.uint8)
    return Trajectory(
        run_id="r",
        side="sub",
        step=0,
        query_id=query,
        rollout_index=0,
        call_id=CALL,
        policy_version=0,
        token_ids=np.arange(6, dtype=np.int32),
        loss_mask=mask,
        logprobs=np.where(mask == 1, -0.5, 0).astype(np.float32),
        prompt_len=3,
        attempt=ATTEMPT,
        findings=query,
    )


def stats(query: str, calls: list[str], attempt: str = ATTEMPT) -> RewardStats:
    return RewardStats(
        run_id="r",
        step=0,
        query_id=query,
        rollout_index=0,
        reward_main=1.0,
        r_format=1.0,
        r_correct=1.0,
        num_sub_calls=len(calls),
        sub_call_ids=calls,
        attempt=attempt,
    )


PIECES = {
    "forged": ("trajectories", CALL, trajectory("q1")),  # the real call id and attempt, another query
    "real": ("trajectories", CALL, trajectory("q0")),
    "stats q0": ("stats", ("q0", 0), stats("q0", [CALL])),
    "stats q1": ("stats", ("q1", 0), stats("q1", [], attempt="bbbbbbbbbbbb")),
}


@pytest.mark.parametrize("order", list(itertools.permutations(PIECES)))
def test_the_real_copy_of_a_call_counts_in_any_order(order):
    aligner, held = Aligner(), HeldStep(0, plan=PLAN)
    for name in order:
        held.deliveries.append(name)
        aligner.admit(held, *PIECES[name], name)
    assert aligner.refused == [("forged", aligner.refused[0][1])] and "claims query 'q1'" in aligner.refused[0][1]
    assert held.collection("trajectories")[CALL].query_id == "q0"
    assert sub_complete(PLAN, held.collection("stats"), held.collection("trajectories"))
    assert failed_and_lost(PLAN, held.collection("stats"), held.collection("trajectories"))["lost"] == 0
    assert "forged" not in held.deliveries and sorted(held.deliveries) == ["real", "stats q0", "stats q1"]


def test_stats_naming_another_rollouts_call_are_refused():
    aligner, held = Aligner(), HeldStep(0, plan=PLAN)
    aligner.admit(held, "stats", ("q1", 0), stats("q1", [CALL], attempt="bbbbbbbbbbbb"), "forged stats")
    assert "is of attempt 'aaaaaaaaaaaa'" in aligner.refused[0][1]
    assert held.collection("stats") == {}
