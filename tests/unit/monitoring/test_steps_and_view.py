"""The run's per-step rows (mgrpo_actors.monitoring.steps), its files (report.py: summary.json,
rewards.png) and the live view (mgrpo_actors/monitoring/run_view.py) fed with synthetic messages, without a network."""

from __future__ import annotations

import io
import json
import math

import pytest
from rich.console import Console

from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.monitoring import StepLog, write_report, write_rewards_png, write_summary_json
from mgrpo_actors.monitoring.run_view import RunView
from protocols import Event, Metric, QueryDone, encode
from tests.monitor_helpers import fake_run, fed

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def step_log(messages) -> StepLog:
    return fed(StepLog(), messages)


def test_rows_carry_both_agents_figures_phases_and_rates():
    log = step_log(fake_run("r1"))
    rows = log.rows()
    assert [row["step"] for row in rows] == [0, 1]
    row = rows[1]
    assert (row["main_reward_mean"], row["main_correct"], row["sub_reward_mean"]) == (0.5, 0.5, 0.3)
    assert (row["d"], row["dk_mean"], row["duplicates"], row["placeholders"], row["dropped"]) == (
        8.0,
        2.0,
        10.0,
        16.0,
        0.0,
    )
    assert (row["main_clip_fraction"], row["sub_clip_fraction"], row["main_version"], row["sub_version"]) == (
        0.10,
        0.20,
        2.0,
        2.0,
    )
    assert row["queries"] == 2
    # Phases from send times: rollout to the last query (+4 s), alignment to the later batch (+5.5 s),
    # learning to the later learner (+8 s); the controller's step time.
    assert (
        row["rollout_s"] == pytest.approx(4.0)
        and row["align_s"] == pytest.approx(1.5)
        and row["learn_s"] == pytest.approx(2.5)
    )
    assert row["seconds"] == 9.0
    assert row["main_gen_tokens_per_s"] == pytest.approx(100.0)  # 400 tokens of M over the 4 s rollout
    assert row["main_learner_tokens_per_s"] == pytest.approx(200.0) and row[
        "sub_learner_tokens_per_s"
    ] == pytest.approx(300.0)
    assert log.finished_steps == 2 and log.run_seconds == pytest.approx(20.0)


def test_a_step_without_learners_or_progress_has_gaps_not_errors():
    log = StepLog()
    log.add_event(Event(kind="step.started", message="", data={"step": 0}), 1.0)
    log.add_event(Event(kind="main.batch", message="", data={"step": 0, "reward_mean": 1.0, "tokens": 10.0}), 3.0)
    log.add_event(Event(kind="node.started", message="", data={}), 3.5)  # other events are ignored
    log.add_event(Event(kind="sub.batch", message="", data={"step": "x"}), 3.5)  # no valid step: ignored
    (row,) = log.rows()
    assert row["main_reward_mean"] == 1.0 and row["sub_reward_mean"] is None and row["main_loss"] is None
    assert row["rollout_s"] is None and row["align_s"] is None and row["main_gen_tokens_per_s"] is None
    assert log.run_seconds is None  # not finished


def test_the_ablation_queue_shows_only_where_the_sub_batch_reports_it(tmp_path):
    # algo.alignment.mode: none reports carried and queued (alignment/unaligned.py build_fifo_sub_batch); others don't.
    figures = {"step": 0, "samples": 4.0, "d": 2.0, "calls": 3.0, "placeholders": 0.0, "dropped": 1.0}
    log = StepLog()
    log.add_event(Event(kind="sub.batch", message="", data={**figures, "carried": 2.0, "queued": 1.0}), 1.0)
    log.add_event(Event(kind="sub.batch", message="", data={**figures, "step": 1}), 2.0)
    (queued, aligned) = log.rows()
    assert (queued["carried"], queued["queued"], aligned["carried"], aligned["queued"]) == (2.0, 1.0, None, None)
    view, out = _view(tmp_path)
    view.feed(encode(Event(kind="sub.batch", message="", data={**figures, "carried": 2.0, "queued": 1.0})))
    view.feed(encode(Event(kind="sub.batch", message="", data={**figures, "step": 1})))
    first, second = [line for line in out.getvalue().splitlines() if "sub batch:" in line]
    assert first.endswith("placeholders 0, dropped 1, carried 2, queued 1")
    assert second.endswith("placeholders 0, dropped 1")


def test_a_resumed_step_starts_its_rollouts_over():
    log = StepLog()
    log.add_event(Event(kind="step.started", message="", data={"step": 0}), 0.0)
    log.add_query_done(QueryDone(run_id="r", step=0, query_id="q0", attempt="a", num_rollouts=2), 50.0)
    log.add_event(Event(kind="step.started", message="step 0 (resumed)", data={"step": 0}), 100.0)
    log.add_query_done(QueryDone(run_id="r", step=0, query_id="q1", attempt="b", num_rollouts=2), 103.0)
    (row,) = log.rows()
    assert row["queries"] == 1 and row["rollout_s"] == pytest.approx(3.0)


def test_summary_json_has_one_row_per_step_and_only_standard_json(tmp_path):
    rows = step_log(fake_run("r1")).rows()
    rows[0]["main_loss"] = math.nan
    path = write_summary_json(rows, tmp_path / "deep" / "summary.json", "r1", seconds=20.0)
    document = json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))
    assert document["run_id"] == "r1" and document["seconds"] == 20.0
    assert [row["step"] for row in document["steps"]] == [0, 1]
    assert document["steps"][0]["main_loss"] is None and document["steps"][1]["main_reward_mean"] == 0.5


def test_rewards_png_is_a_png(tmp_path):
    rows = step_log(fake_run("r1")).rows()
    rows[0]["sub_reward_mean"] = None  # a gap, not an error
    path = write_rewards_png(rows, tmp_path / "rewards.png", "run r1")
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000


def test_write_report_writes_both_files_even_for_no_steps(tmp_path):
    paths = write_report([], tmp_path / "r0", "r0")
    assert [p.name for p in paths] == ["summary.json", "rewards.png"]
    assert json.loads(paths[0].read_text())["steps"] == [] and paths[1].read_bytes()[:8] == PNG_SIGNATURE


def _view(tmp_path) -> tuple[RunView, io.StringIO]:
    out = io.StringIO()
    config = load_config(NodeConfig, None, [f"run.dir={tmp_path}", "run.id=r1"])
    return RunView(Console(file=out, width=400, highlight=False, color_system=None), config), out


def test_the_view_fed_with_messages_shows_each_step_and_writes_the_report(tmp_path):
    view, out = _view(tmp_path)
    kinds = [view.feed(encode(message)) for message, _ in fake_run("r1")]
    assert kinds[0] == "step.started" and kinds[1] is None and kinds[-1] == "run.finished"  # QueryDone: no kind
    assert view.feed(encode(Metric(name="main.reward_mean", value=0.5))) is None  # metrics are skipped
    assert view.feed(b"not msgpack") is None  # and what does not decode
    text = out.getvalue()
    assert (
        "step 0: 2 queries × 2 rollouts" in text
        and "query q1: 2 rollouts, 3 sub calls, correct 1/2, R_M 0.550 (4.0 s)" in text
    )
    assert "main batch: 4 samples, R_M mean 0.500" in text and "sub batch: 32 samples (D = 8)" in text
    assert "step 1 finished in 9.0 s" in text and "run r1 finished after 2 steps" in text
    lines = text.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("  step 1:")))
    assert lines[at] == "  step 1: R_M 0.500, R_S 0.300, M correct 0.500; d_k 2.00, D 8"
    # real send times: values vary
    assert (
        lines[at + 1].startswith("    clip M 0.100, S 0.200; tokens/s: M generated ") and "learners M " in lines[at + 1]
    )
    assert lines[at + 2].startswith("    seconds: rollout ") and lines[at + 2].endswith("step 9.0")
    view.summary()
    table = out.getvalue().split("run 'r1': 2 steps")[1]
    assert (
        "0.250" in table
        and "0.100" in table
        and "0.200" in table
        and "10/16/0" in table
        and "seconds per phase" in table
    )
    per_question = table.split("M's correct rollouts (of K) per question, per step:")[1].splitlines()
    assert [line.split() for line in per_question if line.startswith(" q") and "question" not in line] == [
        ["q0", "0/2", "1/2"],
        ["q1", "1/2", "2/2"],
    ]
    # the same questions both steps: the first step against the last, with its exact test
    assert "M correct on the same 2 questions: step 0 1/4 (0.250) -> step 1 3/4 (0.750), +0.500; p = " in table
    paths = view.write_report()
    assert paths == [tmp_path / "r1" / "summary.json", tmp_path / "r1" / "rewards.png"]
    summary = json.loads(paths[0].read_text())
    steps = summary["steps"]
    assert [step["questions"] for step in steps] == [{"q0": [0, 2], "q1": [1, 2]}, {"q0": [1, 2], "q1": [2, 2]}]
    assert (summary["learning"]["first_correct"], summary["learning"]["last_correct"]) == (1, 3)
    assert f"run report: {paths[0]}, {paths[1]}" in out.getvalue()


def test_text_off_the_wire_is_not_markup_and_warnings_show(tmp_path):
    view, out = _view(tmp_path)
    assert (
        view.feed(encode(Event(kind="node.failed", message="actor [/b] died [bold]", level="error"))) == "node.failed"
    )
    view.feed(encode(Event(kind="step.finished", message="step [x] finished", data={"step": 3, "seconds": 1.0})))
    assert "error: actor [/b] died [bold]" in out.getvalue() and "step [x] finished" in out.getvalue()
    assert "  step 3: R_M -, R_S -, M correct -; d_k -, D -" in out.getvalue()  # nothing else published: gaps


def test_the_monitor_is_a_built_role_that_all_does_not_start():
    from actors.roles import ROLES, expand_roles

    assert ROLES["monitor"].start == "actors.monitor:start_monitor"
    assert "monitor" not in expand_roles(["all"]) and "monitor" not in expand_roles(
        ["all"], load_config(NodeConfig, None, [])
    )
    assert expand_roles(["monitor", "tool"]) == ["tool", "monitor"]


def test_the_per_question_table_needs_a_question_met_twice():
    from mgrpo_actors.monitoring.run_view import questions_table

    once = [{"step": 0, "questions": {"a": [1, 4]}}, {"step": 1, "questions": {"b": [2, 4]}}]
    assert questions_table(once) is None
    again = [*once, {"step": 2, "questions": {"a": [3, 4]}}]
    table = questions_table(again)
    assert (
        table is not None and table.row_count == 1 and [c.header for c in table.columns] == ["question", "0", "1", "2"]
    )
