"""How the agents store what a batch produced, with fakes only (no NATS server):

- MainAgentActor._publish / _store (actors/main_agent.py): every outcome's trajectories in one js_publish_many
  call, then the reward stats of the outcomes whose trajectories are stored in a second one; an outcome wholly
  stored gets its stats resent later, its query_done and its ack, any other has its request handed back.
- SubAgentActor._store_trajectories (actors/sub_agent.py): one js_publish_many call for the batch's trajectories.
- LearnerActor.on_chunk (actors/learner.py): a halted learner holds a chunk without touching its batches.

The methods are called unbound on a SimpleNamespace standing for the actor. js_publish_many's contract
(mgrpo_actors/runtime/bus_jetstream.py): per item a sequence or the Exception that item met; it raises only when
the bus itself fails.
"""

from types import SimpleNamespace

import pytest

import actors.main_agent
from actors.learner import LearnerActor
from actors.main_agent import MainAgentActor
from actors.sub_agent import SubAgentActor
from mgrpo_actors.runtime import HOLD
from protocols import Subjects

SUBJECTS = Subjects("r1")
TRAJ_MAIN = SUBJECTS.trajectories("main")
STATS = SUBJECTS.reward_stats_of("sub")


class FakeBus:
    """Records js_publish_many and publish calls in `events`; `fail(subject, message, msg_id)` returns the
    Exception an item meets (None: stored as the next sequence); `broken` makes js_publish_many itself raise."""

    def __init__(self, events, fail=lambda subject, message, msg_id: None, broken=None):
        self.subjects = SUBJECTS
        self.events, self.fail, self.broken = events, fail, broken
        self.calls: list[list[tuple]] = []
        self.seq = 0

    def js_publish_many(self, items):
        self.calls.append(list(items))
        self.events.append(("store", len(items)))
        if self.broken is not None:
            raise self.broken
        results = []
        for item in items:
            self.seq += 1
            results.append(self.fail(*item) or self.seq)
        return results

    def publish(self, subject, message):
        self.events.append(("publish", subject, message))


class FakeDelivery:
    def __init__(self, name, events):
        self.name, self.events = name, events

    def ack(self):
        self.events.append(("ack", self.name))

    def nak(self, *args, **kwargs):
        raise AssertionError(f"{self.name} nak'ed")


def outcome(query, trajectories=1, stats=1):
    """A QueryOutcome-like object: `trajectories` trajectories and `stats` RewardStats for the type "sub"."""
    return SimpleNamespace(
        trajectories=[f"traj-{query}-{k}" for k in range(trajectories)],
        stats={"sub": [SimpleNamespace(step=3, query_id=query, rollout_index=k, attempt="a1") for k in range(stats)]},
        done=f"done-{query}",
    )


@pytest.fixture
def main(monkeypatch):
    """A fake MainAgentActor: returns (publish(outcomes, fail=..., broken=...), events, handed_back)."""
    events: list[tuple] = []
    handed_back: list[tuple[str, str]] = []

    def resend_later(bus, subject, message, msg_id):
        events.append(("resend", subject, msg_id))
        return 1

    monkeypatch.setattr(actors.main_agent, "resend_later", resend_later)

    def publish(outcomes, **bus_options):
        fake = SimpleNamespace(bus=FakeBus(events, **bus_options))
        fake.hand_back = lambda delivery, reason: handed_back.append((delivery.name, reason))
        fake._store = lambda per: MainAgentActor._store(fake, per)
        deliveries = [FakeDelivery(o.done.removeprefix("done-"), events) for o in outcomes]
        MainAgentActor._publish(fake, outcomes, deliveries)
        return fake.bus

    return publish, events, handed_back


def reported(events, query):
    """The events that report `query` done (its stats resent, its query_done, its ack)."""
    return [e for e in events if query in str(e[-1]) and e[0] in ("resend", "publish", "ack")]


def test_all_stored_goes_in_two_calls_then_resends_reports_done_and_acks(main):
    publish, events, handed_back = main
    bus = publish([outcome("q1", trajectories=2, stats=2), outcome("q2")])
    assert bus.calls == [
        [(TRAJ_MAIN, "traj-q1-0", None), (TRAJ_MAIN, "traj-q1-1", None), (TRAJ_MAIN, "traj-q2-0", None)],
        [
            (STATS, bus.calls[1][0][1], "stats-3-q1-0-a1"),
            (STATS, bus.calls[1][1][1], "stats-3-q1-1-a1"),
            (STATS, bus.calls[1][2][1], "stats-3-q2-0-a1"),
        ],
    ]
    assert events == [
        ("store", 3),
        ("store", 3),
        ("resend", STATS, "stats-3-q1-0-a1"),
        ("resend", STATS, "stats-3-q1-1-a1"),
        ("publish", SUBJECTS.query_done, "done-q1"),
        ("ack", "q1"),
        ("resend", STATS, "stats-3-q2-0-a1"),
        ("publish", SUBJECTS.query_done, "done-q2"),
        ("ack", "q2"),
    ]
    assert handed_back == []


def test_an_outcome_whose_trajectory_is_not_stored_sends_no_stats_and_is_handed_back(main):
    publish, events, handed_back = main
    bus = publish([outcome("q1"), outcome("q2")], fail=lambda s, m, i: OSError("full") if m == "traj-q1-0" else None)
    assert [msg_id for _, _, msg_id in bus.calls[1]] == ["stats-3-q2-0-a1"]  # q1's stats not published at all
    assert handed_back == [("q1", "outcome not stored: OSError: full")]
    assert reported(events, "q1") == []
    assert reported(events, "q2") == [
        ("resend", STATS, "stats-3-q2-0-a1"),
        ("publish", SUBJECTS.query_done, "done-q2"),
        ("ack", "q2"),
    ]


def test_an_outcome_whose_stats_are_not_stored_is_handed_back_without_resends(main):
    publish, events, handed_back = main
    bus = publish(
        [outcome("q1"), outcome("q2")], fail=lambda s, m, i: TimeoutError("t") if i == "stats-3-q1-0-a1" else None
    )
    assert len(bus.calls[1]) == 2
    assert [(name, reason.startswith("outcome not stored:")) for name, reason in handed_back] == [("q1", True)]
    assert reported(events, "q1") == []
    assert reported(events, "q2")[-1] == ("ack", "q2")


def test_a_failed_bus_hands_every_outcome_back_and_acks_none(main):
    publish, events, handed_back = main
    publish([outcome("q1"), outcome("q2")], broken=ConnectionError("bus down"))
    assert handed_back == [
        ("q1", "outcome not stored: ConnectionError: bus down"),
        ("q2", "outcome not stored: ConnectionError: bus down"),
    ]
    assert [e for e in events if e[0] != "store"] == []


def test_an_outcome_with_nothing_to_store_is_reported_done_and_acked(main):
    publish, events, handed_back = main
    publish([outcome("empty", trajectories=0, stats=0)])
    assert handed_back == []
    assert [e for e in events if e[0] != "store"] == [("publish", SUBJECTS.query_done, "done-empty"), ("ack", "empty")]


def test_sub_agent_stores_its_trajectories_in_one_call_and_none_where_there_is_none():
    events: list[tuple] = []
    fake = SimpleNamespace(
        side="sub", bus=FakeBus(events, fail=lambda s, m, i: ValueError("bad") if m == "t3" else None)
    )
    outcomes = [SimpleNamespace(trajectory=t) for t in ("t0", None, "t2", "t3")]
    stored = SubAgentActor._store_trajectories(fake, outcomes)
    traj_sub = SUBJECTS.trajectories("sub")
    assert fake.bus.calls == [[(traj_sub, "t0", None), (traj_sub, "t2", None), (traj_sub, "t3", None)]]
    assert stored[:3] == [1, None, 2]
    assert isinstance(stored[3], ValueError)

    broken = ConnectionError("bus down")
    fake.bus = FakeBus(events, broken=broken)
    assert SubAgentActor._store_trajectories(fake, outcomes) == [broken, None, broken, broken]


def test_a_halted_learner_holds_a_chunk_without_adding_it():
    def add(*args):
        raise AssertionError("batches.add called while halted")

    fake = SimpleNamespace(side="main", halted=True, batches=SimpleNamespace(add=add))
    delivery = FakeDelivery("chunk", events := [])
    assert LearnerActor.on_chunk(fake, SimpleNamespace(side="main", step=3), delivery) is HOLD
    assert events == []
