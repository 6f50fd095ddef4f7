"""`mgrpo compare --parallel` (compare/schedule.py): steps run once what they build on is done, up to N at once,
each on its own share of the cores; a failure starts nothing more."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from mgrpo_actors.compare.schedule import CoreLanes, Step, core_shares, run_graph


def test_one_at_a_time_runs_in_the_order_given_once_ready():
    ran: list[str] = []

    def step(name: str, after: list[str]) -> Step:
        return Step(name, after, lambda: ran.append(name) or name.upper())

    plan = [step("warmup-a", []), step("warmup-b", []), step("eval-a", ["warmup-a"]), step("run-a", ["warmup-a"])]
    assert run_graph(plan, 1) == {"warmup-a": "WARMUP-A", "warmup-b": "WARMUP-B", "eval-a": "EVAL-A", "run-a": "RUN-A"}
    assert ran == ["warmup-a", "warmup-b", "eval-a", "run-a"]


def test_two_at_a_time_overlap_and_a_step_waits_for_what_it_builds_on():
    both = threading.Barrier(2, timeout=10)  # broken (an error) unless two steps run at once
    finished: list[str] = []

    def together(name: str):
        def work() -> None:
            both.wait()
            time.sleep(0.05)
            finished.append(name)

        return work

    def after_a() -> list[str]:
        return list(finished)  # what had finished when it started

    plan = [Step("a", [], together("a")), Step("b", [], together("b")), Step("c", ["a", "b"], after_a)]
    assert sorted(run_graph(plan, 2)["c"]) == ["a", "b"]
    assert not both.broken


def test_a_step_marked_alone_runs_with_none_beside_it_and_the_later_ones_wait_for_it():
    """Warm-ups run alone (a training beside another ran several times slower): at parallel 2 the alone step waits
    for the step running, nothing starts beside it, and a step after it in the order waits for it though ready."""
    lock = threading.Lock()
    running: set[str] = set()
    seen: dict[str, set[str]] = {}  # who else ran at some point while each step ran

    def step(name: str, after: list[str], alone: bool = False) -> Step:
        def work() -> None:
            with lock:
                running.add(name)
                for other in running:
                    seen.setdefault(other, set()).update(running - {other})
            time.sleep(0.1)
            with lock:
                running.discard(name)

        return Step(name, after, work, alone=alone)

    plan = [
        step("eval-a", []),
        step("warmup-b", [], alone=True),
        step("eval-b", ["warmup-b"]),
        step("run-a", []),  # ready from the start, but after the warm-up in the order
        step("run-b", ["warmup-b"]),
    ]
    assert set(run_graph(plan, 2)) == {step.name for step in plan}
    assert seen.get("warmup-b", set()) == set()
    assert "eval-a" not in seen.get("run-a", set())  # run-a started after the warm-up, not beside eval-a


def test_a_failed_step_lets_the_running_one_finish_and_starts_nothing_more():
    started: list[str] = []
    running = threading.Event()

    def slow() -> str:
        started.append("slow")
        running.set()
        time.sleep(0.2)
        return "slow done"

    def fail() -> None:
        running.wait(10)
        started.append("fail")
        raise RuntimeError("a step failed")

    plan = [
        Step("slow", [], slow),
        Step("fail", [], fail),
        Step("after-fail", ["fail"], lambda: started.append("after-fail")),
        Step("after-slow", ["slow"], lambda: started.append("after-slow")),
    ]
    with pytest.raises(RuntimeError, match="a step failed"):
        run_graph(plan, 2)
    assert sorted(started) == ["fail", "slow"]


def test_unknown_dependencies_repeated_names_and_cycles_are_refused():
    with pytest.raises(ValueError, match="unknown: \\['nope'\\]"):
        run_graph([Step("a", ["nope"], lambda: None)], 1)
    with pytest.raises(ValueError, match="unique names"):
        run_graph([Step("a", [], lambda: None), Step("a", [], lambda: None)], 1)
    with pytest.raises(ValueError, match="wait on each other"):
        run_graph([Step("a", ["b"], lambda: None), Step("b", ["a"], lambda: None)], 1)


def test_cores_are_dealt_into_even_shares():
    assert core_shares([0, 1], 2) == [[0], [1]]
    assert core_shares([0, 1, 2, 3, 4], 2) == [[0, 2, 4], [1, 3]]
    assert core_shares([0, 1], 1) == [[0, 1]]
    assert core_shares([0], 2) == [[0], [0]]  # more steps than cores: they share
    with pytest.raises(ValueError):
        core_shares([0, 1], 0)


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores and affinity"
)
def test_steps_at_once_each_run_on_their_own_cores_and_so_do_their_processes():
    lanes = CoreLanes(2)
    both = threading.Barrier(2, timeout=10)
    seen: dict[str, tuple[set[int], set[int]]] = {}

    def pinned(name: str):
        def work() -> None:
            with lanes.lane():
                both.wait()
                # a child process inherits its starting thread's cores
                script = "import os; print(sorted(os.sched_getaffinity(0)))"
                child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stdout
                seen[name] = (os.sched_getaffinity(0), set(json.loads(child)))

        return work

    everything = os.sched_getaffinity(0)
    run_graph([Step("a", [], pinned("a")), Step("b", [], pinned("b"))], 2)
    (a, a_child), (b, b_child) = seen["a"], seen["b"]
    assert a == a_child and b == b_child and not a & b and a | b <= everything
    assert os.sched_getaffinity(0) == everything  # the lanes' threads were given their cores back


@pytest.fixture
def default_ctrl_c():
    """Ctrl-C as Python has it by default (KeyboardInterrupt), whatever handler an earlier test left behind."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupt_stops_the_running_steps_before_it_goes_on(default_ctrl_c):
    stopped = threading.Event()

    def step_until_stopped() -> None:
        threading.Timer(0.2, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)).start()
        assert stopped.wait(10), "never stopped"

    ran_after: list[str] = []
    plan = [Step("long", [], step_until_stopped), Step("next", ["long"], lambda: ran_after.append("next"))]
    with pytest.raises(KeyboardInterrupt):
        run_graph(plan, 1, stop=stopped.set)
    assert stopped.is_set() and ran_after == []


def test_stopping_the_runner_ends_its_processes(tmp_path):
    from mgrpo_actors.compare.steps import StepRunner

    runner = StepRunner(None, tmp_path, [], "", CoreLanes(1))
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]),
        subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE, text=True),
    ]
    children[1].stdout.readline()  # its SIGTERM handler is set
    runner.children.update(children)
    started = time.monotonic()
    runner.stop(grace_s=1.0)
    assert [child.wait(5) for child in children] == [-signal.SIGTERM, -signal.SIGKILL]
    assert time.monotonic() - started < 5


def test_a_finished_step_whose_output_changed_since_is_redone(tmp_path, monkeypatch):
    from mgrpo_actors.compare import steps as compare_steps
    from mgrpo_actors.compare.progress import PlanProgress
    from mgrpo_actors.compare.steps import StepRunner

    output = tmp_path / "made.json"
    runner = StepRunner(PlanProgress(tmp_path, ["warmup-multi"]), tmp_path, [], "cfg", CoreLanes(1))
    ran: list[str] = []

    def fake_mgrpo(self, name: str, *args: str) -> float:
        ran.append(name)
        output.write_text("{}")
        return 1.5

    monkeypatch.setattr(compare_steps.StepRunner, "_mgrpo", fake_mgrpo)
    assert runner.run("warmup-multi", [output], [], "warmup") == 1.5 and ran == ["warmup-multi"]
    first = runner.progress.records["warmup-multi"]["id"]
    assert runner.run("warmup-multi", [output], [], "warmup", current=lambda: True) == 1.5 and len(ran) == 1
    runner.run("warmup-multi", [output], [], "warmup", current=lambda: False)
    assert len(ran) == 2 and runner.progress.records["warmup-multi"]["id"] != first  # what builds on it is redone
