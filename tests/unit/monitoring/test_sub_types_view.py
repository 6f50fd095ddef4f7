"""Several sub-agent types (issue 22, 1 + n) in what the run shows people: each type's figures under the row's
`subs` (the flat sub-agent keys None: they would show one type as the run's only one), the view's lines and
tables per type, the "trained:" line over every side and one R_S line per type in rewards.png; a run of the one
default type keeps today's rows, with `subs.sub` the same figures as its flat keys."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from mgrpo_actors.cli.run import trained_line
from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.monitoring import StepLog, report, write_summary_json
from mgrpo_actors.monitoring.run_view import RunView
from protocols import Event, QueryDone, encode
from tests.monitor_helpers import fake_run, fed

TYPES = ("searcher", "calculator")
# A sub-agent type's flat key in a one-type run's row, by its key in the row's `subs` entry.
FLAT_KEYS = {
    "reward_mean": "sub_reward_mean",
    "calls": "sub_calls",
    "d": "d",
    "dk_mean": "dk_mean",
    "duplicates": "duplicates",
    "placeholders": "placeholders",
    "dropped": "dropped",
    "carried": "carried",
    "queued": "queued",
    "samples": "sub_samples",
    "loss": "sub_loss",
    "clip_fraction": "sub_clip_fraction",
    "staleness_max": "sub_staleness_max",
    "version": "sub_version",
    "learner_s": "sub_learner_s",
    "learner_tokens_per_s": "sub_learner_tokens_per_s",
}


def _event(kind: str, **data: Any) -> Event:
    return Event(kind=kind, message=f"{kind} of step {data.get('step')}", node="fake", role="fake", data=data)


def two_type_step(step: int = 0, calculator_samples: float = 8.0) -> list[tuple[Any, float]]:
    """One step of a run with sub-agent types searcher and calculator (send-time offsets): the searcher's batch at
    +5.5 s, the calculator's at +6 s (the last batch), the learners at +7 s (main), +8 s (searcher), +8.5 s
    (calculator: the last); and a `sub.batch` of a side this run does not have."""
    batch = {"calls": 6.0, "duplicates": 1.0, "placeholders": 2.0, "dropped": 0.0}
    learned = {"step": step, "version": step + 1, "seconds": 4.0}
    return [
        (_event("step.started", step=step), 0.0),
        (QueryDone(run_id="r1", step=step, query_id="q0", attempt="a", num_rollouts=2), 4.0),
        (_event("main.batch", step=step, reward_mean=0.25, samples=4.0, tokens=400.0), 5.0),
        (_event("searcher.batch", step=step, reward_mean=0.5, d=8.0, dk_mean=2.0, samples=32.0, **batch), 5.5),
        (_event("calculator.batch", step=step, reward_mean=0.75, d=4.0, dk_mean=1.0, samples=16.0, **batch), 6.0),
        (_event("sub.batch", step=step, reward_mean=0.1, d=2.0), 6.2),
        (_event("main.learned", step=step, version=step + 1, loss=0.01, samples=4.0, seconds=2.0, tokens=400.0), 7.0),
        (_event("searcher.learned", **learned, loss=0.02, clip_fraction=0.2, samples=12.0, tokens=1200.0), 8.0),
        (_event("calculator.learned", **learned, loss=0.03, clip_fraction=0.3, samples=calculator_samples), 8.5),
        (_event("step.finished", step=step, seconds=9.0), 9.0),
    ]


def test_a_two_type_row_has_each_types_figures_under_subs_and_no_flat_sub_figures():
    (row,) = fed(StepLog(sub_types=TYPES), two_type_step()).rows()
    searcher, calculator = row["subs"]["searcher"], row["subs"]["calculator"]
    assert list(row["subs"]) == list(TYPES)  # config order; the run's only sub sides (its sub.batch is ignored)
    assert (searcher["reward_mean"], searcher["d"], searcher["dk_mean"], searcher["calls"]) == (0.5, 8.0, 2.0, 6.0)
    assert (calculator["reward_mean"], calculator["d"], calculator["dk_mean"]) == (0.75, 4.0, 1.0)
    assert (searcher["duplicates"], searcher["placeholders"], searcher["dropped"]) == (1.0, 2.0, 0.0)
    assert (searcher["samples"], searcher["loss"], searcher["clip_fraction"], searcher["version"]) == (
        12.0,
        0.02,
        0.2,
        1.0,
    )
    assert searcher["learner_s"] == 4.0 and searcher["learner_tokens_per_s"] == pytest.approx(300.0)
    assert calculator["samples"] == 8.0 and calculator["learner_tokens_per_s"] is None  # no tokens published
    assert all(row[flat] is None for flat in FLAT_KEYS.values()), {flat: row[flat] for flat in FLAT_KEYS.values()}
    assert row["main_reward_mean"] == 0.25 and row["main_samples"] == 4.0
    # Alignment ends with the last of all sides' batches (+6 s), learning with the last learner (+8.5 s).
    assert row["align_s"] == pytest.approx(2.0) and row["learn_s"] == pytest.approx(2.5)


def test_the_one_type_row_has_subs_sub_equal_to_its_flat_figures():
    messages = [*fake_run("r1"), (_event("sub.batch", step=2, carried=2.0, queued=1.0), 30.0)]
    rows = fed(StepLog(), messages).rows()
    for row in rows:
        assert list(row["subs"]) == ["sub"]
        assert row["subs"]["sub"] == {key: row[flat] for key, flat in FLAT_KEYS.items()}
    assert rows[1]["subs"]["sub"]["reward_mean"] == 0.3 and rows[2]["subs"]["sub"]["carried"] == 2.0


def test_a_run_without_a_sub_side_records_main_only():
    log = fed(StepLog(sub_types=()), two_type_step())
    (row,) = log.rows()
    assert log.sides == ("main",) and row["subs"] == {} and row["sub_reward_mean"] is None
    # Only M's batch (+5 s) and learner (+7 s) count: the other sides' events are not this run's.
    assert row["align_s"] == pytest.approx(1.0) and row["learn_s"] == pytest.approx(2.0)


def _two_type_view(tmp_path) -> tuple[RunView, io.StringIO]:
    out = io.StringIO()
    config = load_config(
        NodeConfig,
        None,
        [
            f"run.dir={tmp_path}",
            "run.id=r1",
            "agents.subs.searcher.model=tiny:sub",
            "agents.subs.calculator.tools=[calculator]",
            "agents.subs.calculator.description=computes",
            "tools.serve=[search, visit, calculator]",
        ],
    )
    return RunView(Console(file=out, width=400, highlight=False, color_system=None), config), out


def test_the_view_of_a_two_type_run_shows_each_type_and_trains_every_side(tmp_path):
    view, out = _two_type_view(tmp_path)
    for message, _ in [*two_type_step(0), *two_type_step(1)]:
        view.feed(encode(message))
    text = out.getvalue()
    assert "  searcher batch: 32 samples (D = 8), R_S mean 0.500 over 6 calls" in text
    assert "  calculator learner: version 2, loss 0.0300, clip fraction 0.300, 8 samples" in text
    assert "sub batch" not in text  # not a side of this run
    lines = text.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("  step 1:")))
    assert lines[at] == "  step 1: R_M 0.250, R_S searcher 0.500, calculator 0.750, M correct -"
    assert lines[at + 1] == "    d_k searcher 2.00, calculator 1.00; D searcher 8, calculator 4"
    assert lines[at + 2].startswith("    clip M -, searcher 0.200, calculator 0.300; tokens/s: M generated ")
    assert lines[at + 2].endswith("learners M 200, searcher 300, calculator -")
    view.summary()
    table = out.getvalue().split("sub-agent types: R_S, alignment, samples trained on, learner")[1].splitlines()
    cells = [line.split() for line in table if line.strip()[:1].isdigit()][:4]
    assert cells[:2] == [
        ["0", "searcher", "0.500", "8", "2.00", "1/2/0", "12", "0.0200", "0.200", "300"],
        ["0", "calculator", "0.750", "4", "1.00", "1/2/0", "8", "0.0300", "0.300"],
    ]
    learners = ["main", "searcher", "calculator"]
    assert view.trained_samples == {"main": 8, "searcher": 24, "calculator": 16}
    assert trained_line(view.config.sides, learners, view.trained_samples) == (
        "trained: main (8 samples), searcher (24 samples), calculator (16 samples)"
    )


def test_a_type_whose_learner_applied_nothing_is_said_to_have_trained_nothing(tmp_path):
    view, _ = _two_type_view(tmp_path)
    for message, _ in two_type_step(0, calculator_samples=0.0):
        view.feed(encode(message))
    learners = ["main", "searcher", "calculator"]
    assert trained_line(view.config.sides, learners, view.trained_samples) == (
        "trained: main (4 samples), searcher (12 samples); trained on nothing: calculator (no sample had an advantage)"
    )


def test_rewards_png_has_one_r_s_line_per_type_and_today_s_lines_for_one_type():
    rows = fed(StepLog(sub_types=TYPES), [*two_type_step(0), *two_type_step(1)]).rows()
    curves = report.reward_curves(rows)
    assert [(label, values, style) for label, values, _, style in curves][1:3] == [
        ("R_S searcher", [0.5, 0.5], "-"),
        ("R_S calculator", [0.75, 0.75], "-"),
    ]
    assert [label for label, *_ in curves] == [
        "R_M mean (main agent)",
        "R_S searcher",
        "R_S calculator",
        "M correct (r_correct mean)",
    ]
    assert len({colour for _, _, colour, _ in curves}) == 4
    one_type = report.reward_curves(fed(StepLog(), fake_run("r1")).rows())
    assert [(label, values) for label, values, _, _ in one_type][:2] == [
        ("R_M mean (main agent)", [0.25, 0.5]),
        ("R_S mean (sub-agent)", [0.1, 0.3]),
    ]


def test_summary_json_keeps_the_types_figures_and_nulls_what_json_cannot_hold(tmp_path):
    rows = fed(StepLog(sub_types=TYPES), two_type_step()).rows()
    rows[0]["subs"]["calculator"]["loss"] = float("inf")
    document = json.loads(write_summary_json(rows, tmp_path / "summary.json", "r1").read_text())
    (step,) = document["steps"]
    assert step["subs"]["searcher"]["reward_mean"] == 0.5 and step["subs"]["calculator"]["loss"] is None
    assert step["sub_reward_mean"] is None and step["d"] is None
