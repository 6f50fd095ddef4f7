"""The live view of a run (`mgrpo run`, `mgrpo-node --role monitor`): one line per event as it happens,
a short block per finished step (rewards of M and of each sub-agent type, d_k, D, clip fractions, tokens/s,
time per phase), and at the end the per-step tables and the run's files (summary.json, rewards.png).

Built only from what the run publishes for people (events and query progress, mgrpo_actors/monitoring/
steps.py says which figure comes from where), so the same view is fed live from core subjects
(`attach`, what `mgrpo run` does) or from a replay of the run's metrics stream (`feed`, the monitor).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.monitoring import StepLog, write_report
from mgrpo_actors.monitoring.learning import learning_check
from mgrpo_actors.monitoring.steps import StepRecord
from mgrpo_actors.runtime import Bus, Delivery
from mgrpo_actors.runtime.replay import stored_messages
from protocols import DEFAULT_SUB_TYPE, MAIN_SIDE, Event, ProtocolError, QueryDone, decode_envelope

__all__ = ["RunView", "questions_table", "step_line", "sub_types_table"]


class RunView:
    """Prints the run's progress; thread-safe (`attach`'s callbacks run on the bus thread: print only)."""

    def __init__(self, console: Console, config: NodeConfig) -> None:
        self.console = console
        self.config = config
        self.log = StepLog(sub_types=tuple(side for side in config.sides if side != MAIN_SIDE))  # single-agent: none
        self._lock = threading.Lock()
        self._quiet = False  # while replaying what was shown before (a resumed run): record, print nothing

    @property
    def trained_samples(self) -> dict[str, int]:
        """Side -> samples its learner trained on over the run (each step once, however often it was reported)."""
        with self._lock:
            rows = self.log.rows()
        return {side: sum(int(_samples(row, side) or 0) for row in rows) for side in self.log.sides}

    def attach(self, bus: Bus, replay: bool = False) -> None:
        """Follow the run live on core subjects (from now on); with `replay` (a resumed run, before its roles
        start) first take in, without printing, what the run's metrics stream holds of its earlier part, so the
        tables, summary.json and rewards.png cover the whole run, not only the resumed part."""
        if replay:
            try:
                stored = stored_messages(bus, bus.subjects.stream("metrics"))
            except Exception as exc:  # the run goes on; only its report would lack the earlier steps
                self._print(f"resumed: earlier steps not read back ({type(exc).__name__}: {exc})", style="yellow")
                stored = []
            self._quiet = True
            try:
                for message in stored:
                    self.feed(message.data)
            finally:
                self._quiet = False
            done = sorted(step for step, record in self.log.steps.items() if record.finished)
            self._print(f"resumed: {len(done)} finished steps read back from the run's metrics stream")
        bus.subscribe(bus.subjects.events, self._on_delivery)
        bus.subscribe(bus.subjects.query_done, self._on_delivery)

    def _on_delivery(self, delivery: Delivery) -> None:
        self.feed(delivery.data)

    def feed(self, data: bytes) -> str | None:
        """Show one raw message of the run (other types and what does not decode are skipped); returns
        the kind of an Event, else None."""
        try:
            envelope = decode_envelope(data, self.config.nats.max_message_bytes)
        except ProtocolError:
            return None
        message = envelope.message
        with self._lock:
            if isinstance(message, QueryDone):
                self.log.add_query_done(message, envelope.sent_at)
                self._query_done(message)
            elif isinstance(message, Event):
                self._event(message, envelope.sent_at)
                return message.kind
        return None

    def _print(self, text: str, style: str | None = None) -> None:
        if self._quiet:
            return
        # Text off the wire is not markup; whole lines: a terminal wraps them if it must, a log file keeps them.
        self.console.print(text, style=style, markup=False, soft_wrap=True)

    def _query_done(self, done: QueryDone) -> None:
        failed = f", {done.failed_rollouts} failed" if done.failed_rollouts else ""
        self._print(
            f"  query {done.query_id}: {done.num_rollouts} rollouts, {done.sub_calls} sub calls{failed}, "
            f"correct {done.correct_rollouts}/{done.num_rollouts}, R_M {done.reward_mean:.3f} ({done.seconds:.1f} s)"
        )

    def _event(self, event: Event, sent_at: float) -> None:
        data = event.data
        record = self.log.add_event(event, sent_at)
        side, _, what = event.kind.partition(".")
        if event.kind == "step.started":
            if not self._quiet:
                self.console.rule(escape(f"step {data.get('step')}"))
            self._print(event.message)
        elif side in self.log.sides and what == "batch":
            self._print(_batch_line(side, data))
        elif side in self.log.sides and what == "learned":
            self._print(
                f"  {side} learner: version {data.get('version')}, loss {_f(data.get('loss'), 4)}, "
                f"clip fraction {_f(data.get('clip_fraction'))}, {_i(data.get('samples'))} samples, "
                f"{_f(data.get('seconds'), 1)} s"
            )
        elif event.kind == "step.finished":
            self._print(event.message, style="bold")
            if record is not None:
                self._print(step_line(record))
        elif event.kind == "run.finished":
            self._print(event.message, style="bold")
        elif event.level in ("warning", "error"):
            self._print(f"{event.level}: {event.message}", style="yellow" if event.level == "warning" else "red")

    def summary(self, seconds: float | None = None) -> None:
        """The per-step tables (rewards, alignment and the samples each learner trained on; learners and time per
        phase; with sub-agent types other than the one default, a table of each type's figures instead of the S
        columns: each fits 80 columns) and the run's time (default: first step started → run finished)."""
        with self._lock:
            rows = self.log.rows()
            seconds = self.log.run_seconds if seconds is None else seconds
        took = f" in {seconds:.1f} s" if seconds is not None else ""
        per_type = _per_type(self.log.sub_types)
        # A run of the one default type (or none) has the S columns of today; another's S figures are per type.
        s_reward_columns = () if per_type else ("R_S", "D", "d_k", "dup/ph/drop")
        rewards = _table(
            escape(f"run {self.config.run.id!r}: {len(rows)} steps{took}"),
            ("step", "R_M", "M correct", "M format ok", *s_reward_columns, "n M" if per_type else "n M/S"),
        )
        learning = _table(
            "learners; M's generated tokens/s; seconds per phase",
            ("step", "loss M", *(() if per_type else ("loss S",)), "clip M", *(() if per_type else ("clip S",)))
            + ("M tok/s", "rollout", "align", "learn", "total"),
        )
        for row in rows:
            samples = _i(row["main_samples"], "-")  # samples each learner trained on
            if per_type:  # S's figures: sub_types_table
                sub_rewards: tuple[str, ...] = ()
                sub_loss: tuple[str, ...] = ()
                sub_clip: tuple[str, ...] = ()
            else:
                sub_rewards = (_f(row["sub_reward_mean"]), _i(row["d"]), _f(row["dk_mean"], 2), _alignment_counts(row))
                samples += f"/{_i(row['sub_samples'], '-')}"
                sub_loss, sub_clip = (_f(row["sub_loss"], 4),), (_f(row["sub_clip_fraction"]),)
            rewards.add_row(
                str(row["step"]),
                _f(row["main_reward_mean"]),
                _f(row["main_correct"]),
                _f(row["main_format_ok"]),
                *sub_rewards,
                samples,
            )
            learning.add_row(
                str(row["step"]),
                _f(row["main_loss"], 4),
                *sub_loss,
                _f(row["main_clip_fraction"]),
                *sub_clip,
                _f(row["main_gen_tokens_per_s"], 0),
                _f(row["rollout_s"], 1),
                _f(row["align_s"], 1),
                _f(row["learn_s"], 1),
                _f(row["seconds"], 1),
            )
        self.console.print(rewards)
        if per_type:
            self.console.print(sub_types_table(rows, self.log.sub_types))
        self.console.print(learning)
        if (per_question := questions_table(rows)) is not None:
            self.console.print("M's correct rollouts (of K) per question, per step:", markup=False)
            self.console.print(per_question)
        if (check := learning_check(rows)) is not None:
            self.console.print(check.line(), markup=False)

    def write_report(self, run_dir: Path | None = None, seconds: float | None = None) -> list[Path]:
        """summary.json and rewards.png in the run directory (default `<run.dir>/<run.id>`); prints their paths."""
        run_dir = Path(self.config.run.dir) / self.config.run.id if run_dir is None else run_dir
        with self._lock:
            rows = self.log.rows()
            seconds = self.log.run_seconds if seconds is None else seconds
        paths = write_report(rows, run_dir, self.config.run.id, seconds)
        self._print("run report: " + ", ".join(str(path) for path in paths))
        return paths


def questions_table(rows: list[dict[str, Any]], most_steps: int = 16) -> Table | None:
    """M's correct rollouts per question and step (its last `most_steps` steps), for the questions met in more than
    one step (a pipeline.question_pool: the same questions again, so each row is a learning curve); None when no
    question came back."""
    rows = rows[-most_steps:]
    seen: dict[str, int] = {}
    for row in rows:
        for query in row.get("questions") or {}:
            seen[query] = seen.get(query, 0) + 1
    repeated = sorted(query for query, steps in seen.items() if steps > 1)
    if not repeated:
        return None
    table = _table("", ("question", *(str(r["step"]) for r in rows)))
    table.columns[0].justify = "left"
    for query in repeated:
        cells = [(row.get("questions") or {}).get(query) for row in rows]
        table.add_row(escape(query), *("" if cell is None else f"{cell[0]}/{cell[1]}" for cell in cells))
    return table


def sub_types_table(rows: list[dict[str, Any]], sub_types: tuple[str, ...]) -> Table:
    """Each sub-agent type's figures per step (a row's `subs`): R_S, alignment, the samples its learner trained on,
    and its learner."""
    table = _table(
        "sub-agent types: R_S, alignment, samples trained on, learner",
        ("step", "type", "R_S", "D", "d_k", "dup/ph/drop", "n", "loss", "clip", "tok/s"),
    )
    table.columns[1].justify = "left"
    for row in rows:
        for sub_type in sub_types:
            figures = row["subs"][sub_type]
            table.add_row(
                str(row["step"]),
                escape(sub_type),
                _f(figures["reward_mean"]),
                _i(figures["d"]),
                _f(figures["dk_mean"], 2),
                _alignment_counts(figures),
                _i(figures["samples"], "-"),
                _f(figures["loss"], 4),
                _f(figures["clip_fraction"]),
                _f(figures["learner_tokens_per_s"], 0),
            )
    return table


def step_line(record: StepRecord) -> str:
    """A finished step in three lines of about 80 characters, four with sub-agent types other than the one default
    (each type's figures after its name); figures not published show as -."""
    r = record.row()
    seconds = (
        f"    seconds: rollout {_f(r['rollout_s'], 1, '-')}, alignment {_f(r['align_s'], 1, '-')}, "
        f"learners {_f(r['learn_s'], 1, '-')}, step {_f(r['seconds'], 1, '-')}"
    )
    if _per_type(record.sub_types):
        subs = r["subs"]
        return (
            f"  step {r['step']}: R_M {_f(r['main_reward_mean'], d='-')}, R_S {_each(subs, 'reward_mean')}, "
            f"M correct {_f(r['main_correct'], d='-')}\n"
            f"    d_k {_each(subs, 'dk_mean', 2)}; D {_each(subs, 'd', 0)}\n"
            f"    clip M {_f(r['main_clip_fraction'], d='-')}, {_each(subs, 'clip_fraction')}; "
            f"tokens/s: M generated {_f(r['main_gen_tokens_per_s'], 1, '-')}, "
            f"learners M {_f(r['main_learner_tokens_per_s'], 0, '-')}, {_each(subs, 'learner_tokens_per_s', 0)}\n"
            + seconds
        )
    return (
        f"  step {r['step']}: R_M {_f(r['main_reward_mean'], d='-')}, R_S {_f(r['sub_reward_mean'], d='-')}, "
        f"M correct {_f(r['main_correct'], d='-')}; d_k {_f(r['dk_mean'], 2, '-')}, D {_i(r['d'], '-')}\n"
        f"    clip M {_f(r['main_clip_fraction'], d='-')}, S {_f(r['sub_clip_fraction'], d='-')}; "
        f"tokens/s: M generated {_f(r['main_gen_tokens_per_s'], 1, '-')}, "
        f"learners M {_f(r['main_learner_tokens_per_s'], 0, '-')}, S {_f(r['sub_learner_tokens_per_s'], 0, '-')}\n"
        + seconds
    )


def _per_type(sub_types: tuple[str, ...]) -> bool:
    """Whether a run's sub-agent figures are shown per type: those of a run with a sub side other than just the one
    default type, whose flat S figures (steps.py) are None."""
    return sub_types not in ((), (DEFAULT_SUB_TYPE,))


def _each(subs: dict[str, dict[str, Any]], key: str, digits: int = 3) -> str:
    """One figure of every sub-agent type, after its name: "searcher 0.500, calculator 0.750"."""
    return ", ".join(f"{sub_type} {_f(figures[key], digits, '-')}" for sub_type, figures in subs.items())


def _alignment_counts(figures: dict[str, Any]) -> str:
    """Duplicates, placeholders and dropped samples of a sub batch (a flat row or a type's figures)."""
    return f"{_i(figures['duplicates'])}/{_i(figures['placeholders'])}/{_i(figures['dropped'])}"


def _samples(row: dict[str, Any], side: str) -> float | None:
    """The samples `side`'s learner trained on in a step (M's flat key, a sub-agent type's entry of `subs`)."""
    return row[f"{MAIN_SIDE}_samples"] if side == MAIN_SIDE else row["subs"][side]["samples"]


def _table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for column in columns:
        table.add_column(column, justify="right")
    return table


def _f(value: Any, digits: int = 3, d: str = "") -> str:
    return d if value is None else f"{float(value):.{digits}f}"


def _i(value: Any, d: str = "") -> str:
    return d if value is None else str(int(value))


def _batch_line(side: str, data: dict[str, Any]) -> str:
    if side == "main":
        return (
            f"  main batch: {_i(data.get('samples'))} samples, R_M mean {_f(data.get('reward_mean'))}, "
            f"correct {_f(data.get('r_correct_mean'))}, format ok {_f(data.get('format_ok_rate'))}, "
            f"failed {_i(data.get('failed'))}"
        )
    # The queue of algo.alignment.mode: none (alignment/fifo_queue.py), the only mode that carries samples.
    queue = f", carried {_i(data['carried'])}, queued {_i(data.get('queued'))}" if "carried" in data else ""
    return (
        f"  {side} batch: {_i(data.get('samples'))} samples (D = {_i(data.get('d'))}), "
        f"R_S mean {_f(data.get('reward_mean'))} over {_i(data.get('calls'))} calls, "
        f"d_k mean {_f(data.get('dk_mean'))}, duplicates {_i(data.get('duplicates'))}, "
        f"placeholders {_i(data.get('placeholders'))}, dropped {_i(data.get('dropped'))}{queue}"
    )
