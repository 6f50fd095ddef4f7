"""`mgrpo warmup --reuse` (cli/warmup.py): the warm-up built in the model cache once, linked into --out, and reused
by the same settings; and what of a config file `mgrpo compare` keys its steps by (cli/compare.py)."""

from __future__ import annotations

import json

import pytest

from mgrpo_actors.cli.compare import _config_content
from mgrpo_actors.cli.warmup import _reused
from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.warmup import cached

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
    assert json.loads((out / "warmup.json").read_text()) == json.loads((target / "warmup.json").read_text())

    # Again into another --out holding a plain directory where a link goes: nothing trains, the link replaces it.
    steps.clear()
    other = tmp_path / "other"
    (other / "main").mkdir(parents=True)
    (other / "main" / "stale.txt").write_text("from before")
    assert _reused(config, other, lambda side, step, loss: steps.append((side, step))) == {
        "main": other / "main",
        "sub": other / "sub",
    }
    assert steps == [] and (other / "main").resolve() == (target / "main").resolve()
    assert not (target / "main" / "stale.txt").exists()


def test_a_config_file_keys_by_its_settings_not_its_comments_or_order(tmp_path):
    a, b, c = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"
    a.write_text("agents:\n  main: {model: tiny:main}  # M\npipeline:\n  steps: 3\n")
    b.write_text("# the same, said otherwise\npipeline: {steps: 3}\nagents:\n  main:\n    model: tiny:main\n")
    c.write_text("agents:\n  main: {model: tiny:main}\npipeline:\n  steps: 4\n")
    assert _config_content(str(a)) == _config_content(str(b)) != _config_content(str(c))
    assert _config_content(None) == b""
