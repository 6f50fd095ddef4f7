"""`mgrpo eval`'s logic, apart from its terminal view: one sampled rollout per question and run (runner.py),
per-run metrics and their spread over runs (metrics.py), the checkpoints of a run as models (checkpoints.py)
and the JSON report (report.py). Its questions from a JSONL file under configurable field names load as
training's do (mgrpo_actors/envs/dataset.py load_questions with a QuestionFields mapping)."""
