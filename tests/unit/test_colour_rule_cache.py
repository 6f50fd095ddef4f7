"""The colour-rule demo's warmed-up models are cached per base model and role (mgrpo_actors/demos/colour_rule.py):
one model warmed up as M and as S, or two models whose directories share a name, never share a cache entry."""

from __future__ import annotations

from pathlib import Path

import mgrpo_actors.demos.colour_rule as colour_rule
from mgrpo_actors.config.node import ToolsConfig


def _targets(monkeypatch, **specs: str) -> tuple[Path, Path]:
    monkeypatch.setattr(colour_rule, "build_once", lambda target, build: target)  # where it would be built
    return colour_rule.warmed_models(ToolsConfig(), **specs)


def test_one_model_warmed_up_as_m_and_as_s_gets_two_entries(monkeypatch):
    main_dir, sub_dir = _targets(monkeypatch, main="tiny:main", sub="tiny:main")
    assert main_dir != sub_dir


def test_two_model_directories_of_one_name_get_two_entries(monkeypatch, tmp_path):
    monkeypatch.setattr(colour_rule, "resolve_model_dir", lambda spec: Path(spec))
    a, b = tmp_path / "a" / "model", tmp_path / "b" / "model"
    first, _ = _targets(monkeypatch, main=str(a), sub="tiny:sub")
    second, _ = _targets(monkeypatch, main=str(b), sub="tiny:sub")
    assert first != second


def test_the_default_pair_is_cached_under_its_own_names(monkeypatch):
    main_dir, sub_dir = _targets(monkeypatch)
    assert main_dir.name.startswith("colour-rule-main-main-") and sub_dir.name.startswith("colour-rule-sub-sub-")
