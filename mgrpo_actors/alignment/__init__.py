"""Alignment, step 5 of a training step: a step's trajectories become exactly one batch per side
(B·K main samples, B·K·D sub samples) with group advantages, and the aligners' holding of a step."""
