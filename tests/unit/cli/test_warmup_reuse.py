"""`mgrpo warmup --reuse` (cli/warmup.py): the warm-up built in the model cache once, linked into --out, and reused
by the same settings; and what of a config file `mgrpo compare` keys its steps by (cli/compare.py)."""

from __future__ import annotations

import argparse
import json

import pytest

from mgrpo_actors.cli.compare import _config_content
from mgrpo_actors.cli.warmup import _reused
from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.warmup import cached
from mgrpo_actors.warmup.linked import same_build

TINY = ["agents.main.model=tiny:main", "agents.sub.model=tiny:sub", "tools.web_entities=300"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setattr(cached, "cache_root", lambda: root)
    return root


def test_built_in_the_cache_once_linked_into_out_and_reused(cache, tmp_path):
    config = load_config(NodeConfig, None, [*TINY, "warmup.steps=1", "warmup.questions=4"])
    steps: list[tuple[str, int]] = []
    out = tmp_path / "out"
    dirs = _reused(config, out, lambda side, step, loss: steps.append((side, step)))
    target = cached.warm_start_dir(config)
    assert target.parent == cache / "warmups" and steps == [("main", 0), ("sub", 0)]
    assert dirs == {"main": out / "main", "sub": out / "sub"}
    for side in ("main", "sub"):
        assert (out / side).is_symlink() and (out / side).resolve() == (target / side).resolve()
        assert (out / side / "config.json").is_file()
    record, cached_record = (
        json.loads((out / "warmup.json").read_text()),
        json.loads((target / "warmup.json").read_text()),
    )
    # the same record, naming the links (the cache's names its build's temporary directory)
    assert {side: agent["dir"] for side, agent in record["agents"].items()} == {
        "main": str(out / "main"),
        "sub": str(out / "sub"),
    }
    for side in ("main", "sub"):  # how much of held-out copying samples each copies (tiny random models: about none)
        assert 0 <= record["agents"][side]["copied_share"] < 0.2
        record["agents"][side].pop("dir"), cached_record["agents"][side].pop("dir")
    assert record == cached_record

    # What `mgrpo compare` checks before it reuses a warm-up step: the links still lead to the build they were made
    # for. A cache entry built again (another record) is not.
    assert same_build(out)
    rebuilt = json.loads((target / "warmup.json").read_text())
    (target / "warmup.json").write_text(json.dumps({**rebuilt, "seconds": rebuilt["seconds"] + 1.0}))
    assert not same_build(out)
    (target / "warmup.json").write_text(json.dumps(rebuilt))
    assert same_build(out) and not same_build(tmp_path / "nowhere")
    (out / "sub").unlink()
    (out / "sub").symlink_to(tmp_path, target_is_directory=True)  # sides leading to two places: not one build
    assert not same_build(out)
    (out / "sub").unlink()
    (out / "sub").symlink_to(target / "sub", target_is_directory=True)
    assert same_build(out)

    # A plain directory, a file and a link elsewhere where the links go: each is replaced.
    steps.clear()
    other = tmp_path / "other"
    (other / "main").mkdir(parents=True)
    (other / "main" / "stale.txt").write_text("from before")
    (other / "sub").write_text("a file")
    assert _reused(config, other, lambda side, step, loss: steps.append((side, step))) == {
        "main": other / "main",
        "sub": other / "sub",
    }
    assert steps == [] and (other / "main").resolve() == (target / "main").resolve()
    assert (other / "sub").resolve() == (target / "sub").resolve()
    assert not (target / "main" / "stale.txt").exists()
    (other / "main").unlink()
    (other / "main").symlink_to(tmp_path, target_is_directory=True)
    _reused(config, other, None)
    assert (other / "main").resolve() == (target / "main").resolve() and sorted(p.name for p in other.iterdir()) == [
        "main",
        "sub",
        "warmup.json",
    ]


def test_an_out_inside_the_model_cache_is_refused(cache):
    config = load_config(NodeConfig, None, [*TINY, "warmup.steps=1", "warmup.questions=4"])
    with pytest.raises(ValueError, match="inside the model cache"):
        _reused(config, cache / "warmups" / "mine", None)


def test_the_flags_reach_the_warm_up_that_is_reused(cache, tmp_path, monkeypatch):
    from mgrpo_actors.cli import warmup

    seen = []
    monkeypatch.setattr(warmup, "_reused", lambda config, out, progress: seen.append(config.warmup) or {})
    parser = argparse.ArgumentParser()
    warmup.add_parser(parser.add_subparsers())
    args = parser.parse_args(
        ["warmup", *(f"--set={o}" for o in TINY), "--steps", "3", "--seed", "5", "--questions", "6", "--reuse"]
    )
    args.out = str(tmp_path / "out")
    assert args.func(args) == 0
    assert (seen[0].steps, seen[0].seed, seen[0].questions) == (3, 5, 6)


def test_a_config_file_keys_by_its_settings_not_its_comments_or_layout(tmp_path):
    a, b, c = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"
    a.write_text("agents:\n  main: {model: tiny:main}  # M\npipeline:\n  steps: 3\n")
    b.write_text("# the same, laid out otherwise\nagents:\n  main:\n    model: tiny:main\npipeline: {steps: 3}\n")
    c.write_text("agents:\n  main: {model: tiny:main}\npipeline:\n  steps: 4\n")
    assert _config_content(str(a)) == _config_content(str(b)) != _config_content(str(c))
    keys = set()
    for value in ("1", "1.0", '"1"', "true", "null"):  # a value's type is part of the setting
        a.write_text(f"pipeline:\n  steps: {value}\n")
        keys.add(_config_content(str(a)))
    assert len(keys) == 5
    assert _config_content(None) == b""


def test_a_model_named_through_a_link_keys_by_where_it_leads(cache, tmp_path):
    from mgrpo_actors.models.loader import resolve_model_dir

    model = resolve_model_dir("tiny:main")
    for name in ("a", "b"):
        (tmp_path / name).symlink_to(model, target_is_directory=True)

    def key(spec: str):
        return cached.warm_start_dir(load_config(NodeConfig, None, [*TINY, f"agents.main.model={spec}"]))

    assert key(str(tmp_path / "a")) == key(str(tmp_path / "b")) == key(str(model))


@pytest.mark.timeout(400)  # three warm-up builds (processes): slow on a busy 2-core machine
def test_a_stopped_reuse_build_saves_its_step_and_the_same_command_goes_on_from_it(tmp_path):
    """SIGTERM (what `mgrpo compare` sends its steps) stops `mgrpo warmup --reuse` after the step it is in, with that
    step's state saved though no checkpoint was due; the same command then goes on after it, not from step 1."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    mgrpo = str(Path(sys.executable).parent / "mgrpo")
    env = {**os.environ, "MGRPO_CACHE": str(tmp_path / "cache")}
    command = [mgrpo, "warmup", *(f"--set={s}" for s in TINY), "--set=warmup.questions=4"]
    command += ["--set=warmup.checkpoint_seconds=3600", "--steps=60", "--batch-size=1", "--reuse", "--out"]
    command += [str(tmp_path / "out")]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in first.stdout:
        lines.append(line)
        if "main: step 6/60" in line:  # printed every 5 steps
            first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 130, "".join(lines)
    stopped = next(line for line in lines if "mgrpo warmup: stopped after main's step" in line)
    step = int(stopped.split("main's step ")[1].split(",")[0])
    assert 6 <= step < 60 and "saved: the same command goes on from there" in stopped

    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"main: resumed after step {step} of 60" in again.stdout
    assert "(an interrupted build of it goes on where it was)" in again.stdout
    record = json.loads((tmp_path / "out" / "warmup.json").read_text())
    assert record["agents"]["main"]["resumed_at"] == [step] and record["agents"]["sub"]["resumed_at"] == []
    assert len(record["agents"]["main"]["losses"]) == 60
