"""The compute thread (runtime/compute.py): work handed to it runs there and comes back (its exceptions too), a
call made on it runs inline (no deadlock), every other thread is made single-threaded for torch, and without
it everything runs where it is called. Each case runs in a fresh interpreter: the compute thread is
process-wide and lives as long as its process."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_without_a_compute_thread_work_runs_where_it_is_called():
    out = _run(
        """
        import threading
        from mgrpo_actors.runtime.compute import compute_thread_running, on_compute_thread, single_threaded_here
        import torch
        torch.set_num_threads(2)
        single_threaded_here()  # a no-op without a compute thread
        assert not compute_thread_running() and torch.get_num_threads() == 2
        print(on_compute_thread(lambda x: (x, threading.current_thread().name), 7))
        """
    )
    assert out.strip() == "(7, 'MainThread')"


def test_work_goes_to_the_compute_thread_and_its_result_or_error_comes_back():
    out = _run(
        """
        import threading
        import torch
        from mgrpo_actors.runtime.compute import on_compute_thread, start_compute_thread

        def where(x, y=0):
            return x + y, threading.current_thread().name, torch.get_num_threads()

        torch.set_num_threads(2)
        start_compute_thread()
        assert torch.get_num_threads() == 1  # the thread that started it computes no more
        print(on_compute_thread(where, 1, y=2))  # with the threads its starter had

        def fails():
            raise KeyError("inside")

        try:
            on_compute_thread(fails)
        except KeyError as exc:
            print("raised", exc)

        def exits():
            raise SystemExit(3)

        try:
            on_compute_thread(exits)
        except SystemExit as exc:
            assert exc.code == 3 and on_compute_thread(lambda: "still serving") == "still serving"

        def nested():  # a call made on the compute thread runs there, inline
            return on_compute_thread(where, 10)

        print(on_compute_thread(nested))
        import time
        results, spans = [], []

        def timed(i):
            started = time.perf_counter()
            time.sleep(0.02)
            spans.append((started, time.perf_counter()))
            return where(i)

        threads = [threading.Thread(target=lambda i=i: results.append(on_compute_thread(timed, i))) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        spans.sort()
        overlapping = any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))
        print(sorted(r[0] for r in results), {r[1] for r in results}, "overlap" if overlapping else "one at a time")
        """
    )
    lines = out.strip().splitlines()
    assert lines[0] == "(3, 'mgrpo-compute', 2)"  # the starter's torch threads, not the 1 it was set to
    assert lines[1] == "raised 'inside'"
    assert lines[2] == "(10, 'mgrpo-compute', 2)"
    assert lines[3] == "[0, 1, 2, 3, 4, 5, 6, 7] {'mgrpo-compute'} one at a time"


def test_an_interrupted_caller_asks_the_work_to_stop_and_waits_for_its_clean_up():
    out = _run(
        """
        import signal, threading, time
        from mgrpo_actors.runtime.compute import on_compute_thread_until, start_compute_thread

        start_compute_thread()
        stop, events = threading.Event(), []

        def long_work():
            try:
                while not stop.is_set():
                    time.sleep(0.01)
                raise KeyboardInterrupt("asked to stop")
            finally:
                time.sleep(0.2)
                events.append("cleaned up")

        def interrupt(*_):
            raise KeyboardInterrupt

        signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        try:
            on_compute_thread_until(stop.set, long_work)
        except KeyboardInterrupt:
            events.append("caller raised")
        print(events)
        """
    )
    assert out.strip() == "['cleaned up', 'caller raised']"


def test_a_node_without_an_agent_or_learner_starts_no_compute_thread_and_imports_no_torch():
    out = _run(
        """
        import sys
        from unittest import mock
        import actors.node as node
        from mgrpo_actors.config import NodeConfig
        from mgrpo_actors.runtime import compute

        with mock.patch.object(node, "ShutdownSignal", side_effect=RuntimeError("stop here")):
            for roles in (["tool"], ["controller", "monitor"], ["tool", "sub-agent"]):
                try:
                    node.run_node(NodeConfig(), roles, "n", embedded=False, duration_s=0)
                except RuntimeError:
                    pass
                print(roles, compute.compute_thread_running(), "torch" in sys.modules)
        """
    )
    assert out.strip().splitlines() == [
        "['tool'] False False",
        "['controller', 'monitor'] False False",
        "['tool', 'sub-agent'] True True",
    ]


def test_an_engine_generates_on_the_compute_thread_at_the_agents_threads():
    out = _run(
        """
        import threading
        import torch
        from mgrpo_actors.engines.base import SamplingParams
        from mgrpo_actors.engines.compute_thread import ComputeThreadEngine
        from mgrpo_actors.engines.hf import HFEngine
        from mgrpo_actors.models.loader import load_model
        from mgrpo_actors.runtime.compute import on_compute_thread, start_compute_thread

        start_compute_thread()
        model, tokenizer = on_compute_thread(load_model, "tiny:main")
        plain = HFEngine(model, tokenizer)
        seen = []
        generate = plain.generate
        def recorded(prompts, params):
            seen.append((threading.current_thread().name, torch.get_num_threads()))
            return generate(prompts, params)

        plain.generate = recorded
        engine = ComputeThreadEngine(plain, threads=2)
        out = engine.generate([[5, 6, 7]], SamplingParams(max_new_tokens=4, seed=0))
        assert len(out) == 1 and 1 <= len(out[0].token_ids) <= 4
        load = plain.load_weights

        def recorded_load(weights, version):
            seen.append(("load", threading.current_thread().name))
            load(weights, version)

        plain.load_weights = recorded_load
        engine.load_weights({name: t.clone() for name, t in model.state_dict().items()}, 3)
        print(seen, engine.policy_version, engine.loads_deltas, engine.pad_token_id == plain.pad_token_id)
        """
    )
    assert out.strip().splitlines()[-1] == "[('mgrpo-compute', 2), ('load', 'mgrpo-compute')] 3 True True"
