"""When a consumer takes its durable as deleted (runtime/consumer.py `_gone`): only after the server has said "not
found" on end for DURABLE_LOST_AFTER_S, so a cluster electing a new leader after a server died (which can answer
"not found" for seconds) does not stop the run; a deleted durable still stops it, once. Clock injected."""

from __future__ import annotations

import asyncio

from mgrpo_actors.runtime.consumer import DURABLE_LOST_AFTER_S, Consumer


class _Answers:
    """The server's answers to "does the durable exist?", in order, and a clock the test moves."""

    def __init__(self, gone: list[bool | Exception]) -> None:
        self.gone = list(gone)
        self.now = 100.0

    async def __call__(self) -> bool:
        answer = self.gone.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _consumer(answers: _Answers, stopped: list[str]) -> Consumer:
    consumer = Consumer(loop=None, stream="S", durable="d", subject="s.>", target=None, batch=1)  # type: ignore[arg-type]
    consumer.durable_gone, consumer.on_durable_gone = answers, stopped.append
    consumer.clock = lambda: answers.now
    return consumer


def _ask(consumer: Consumer, answers: _Answers, after_s: float) -> bool:
    answers.now += after_s
    return asyncio.run(consumer._gone())


def test_a_durable_not_found_on_end_for_the_whole_window_is_lost_once():
    answers, stopped = _Answers([True] * 20), []
    consumer = _consumer(answers, stopped)
    assert _ask(consumer, answers, 0) is False  # the first "not found": the window starts
    asked = [_ask(consumer, answers, 1.0) for _ in range(int(DURABLE_LOST_AFTER_S) - 1)]
    assert asked == [False] * (int(DURABLE_LOST_AFTER_S) - 1) and stopped == []  # 14 s of "not found": not yet
    assert _ask(consumer, answers, 1.0) is True  # 15 s
    assert stopped == ["durable consumer 'd' of stream 'S' no longer exists (deleted?)"]


def test_a_leader_election_that_answers_not_found_for_seconds_does_not_stop_the_run():
    # 10 s of "not found", then the new leader answers: the window starts again from nothing
    answers, stopped = _Answers([True] * 11 + [False] + [True] * 11), []
    consumer = _consumer(answers, stopped)
    assert not any(_ask(consumer, answers, 1.0) for _ in range(23))
    assert stopped == []


def test_a_server_that_cannot_be_asked_is_a_passing_failure_and_restarts_the_window():
    answers, stopped = _Answers([True] * 10 + [ConnectionError("disconnected")] + [True] * 10), []
    consumer = _consumer(answers, stopped)
    assert not any(_ask(consumer, answers, 1.0) for _ in range(21))
    assert stopped == []


def test_without_a_way_to_ask_nothing_is_ever_lost():
    consumer = Consumer(loop=None, stream="S", durable="d", subject="s.>", target=None, batch=1)  # type: ignore[arg-type]
    assert asyncio.run(consumer._gone()) is False
