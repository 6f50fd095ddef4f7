"""What a run reports while it runs, put together for people: per-step rows built from the run's events
(steps.py) and the files written at its end (report.py: summary.json, rewards.png)."""

from mgrpo_actors.monitoring.report import write_report, write_rewards_png, write_summary_json
from mgrpo_actors.monitoring.steps import StepLog

__all__ = ["StepLog", "write_report", "write_rewards_png", "write_summary_json"]
