"""A learner per agent: an aligned batch becomes micro-batches, the clipped objective is applied with a
DeepSpeed engine, and the new weights go to that agent's rollout engines (docs/architecture.md §Engines)."""
