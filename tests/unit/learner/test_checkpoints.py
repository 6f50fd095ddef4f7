"""A checkpoint saved under another ZeRO layout is refused by name before DeepSpeed reads it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from mgrpo_actors.learner.checkpoints import _LAYOUT, _check_layout


def test_a_checkpoint_of_another_zero_layout_is_refused_naming_both(tmp_path):
    (tmp_path / _LAYOUT).write_text(json.dumps({"zero_stage": 2, "world_size": 2}))
    with pytest.raises(ValueError, match="saved with ZeRO stage 2 on 2 rank.*runs stage 0 on 1"):
        _check_layout(tmp_path, SimpleNamespace(zero_stage=0, world_size=1))
    _check_layout(tmp_path, SimpleNamespace(zero_stage=2, world_size=2))  # the same layout loads


def test_a_checkpoint_without_a_layout_file_is_not_checked(tmp_path):
    _check_layout(tmp_path, SimpleNamespace(zero_stage=0, world_size=1))
