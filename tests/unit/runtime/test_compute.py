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
        print(on_compute_thread(where, 1, y=2))

        def fails():
            raise KeyError("inside")

        try:
            on_compute_thread(fails)
        except KeyError as exc:
            print("raised", exc)

        def nested():  # a call made on the compute thread runs there, inline
            return on_compute_thread(where, 10)

        print(on_compute_thread(nested))
        results = []
        threads = [threading.Thread(target=lambda i=i: results.append(on_compute_thread(where, i))) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(sorted(r[0] for r in results), {r[1] for r in results})
        """
    )
    lines = out.strip().splitlines()
    assert lines[0].startswith("(3, 'mgrpo-compute', ")  # its own torch threads, not the caller's 1
    assert lines[1] == "raised 'inside'"
    assert lines[2].startswith("(10, 'mgrpo-compute', ")
    assert lines[3] == "[0, 1, 2, 3, 4, 5, 6, 7] {'mgrpo-compute'}"


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
        engine.load_weights({name: t.clone() for name, t in model.state_dict().items()}, 3)
        print(seen, engine.policy_version, engine.loads_deltas, engine.pad_token_id == plain.pad_token_id)
        """
    )
    assert out.strip().splitlines()[-1] == "[('mgrpo-compute', 2)] 3 True True"
