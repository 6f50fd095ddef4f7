"""`mgrpo eval`'s logic, apart from its terminal view: questions from any JSONL file with configurable
field names (questions.py), one sampled rollout per question and run (runner.py), per-run metrics and
their spread over runs (metrics.py), the checkpoints of a run as models (checkpoints.py) and the JSON
report (report.py)."""
