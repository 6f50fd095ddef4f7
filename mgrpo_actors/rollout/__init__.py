"""Rollouts, steps 2-4 of a training step: episodes driven turn by turn on an agent's engine, the
main and sub rollouts over the bus (with their subtask and tool clients), the same rollouts run
locally (eval, warm-up, `mgrpo rollout`), and their scores."""
