"""Agents' turn logic: the turn format and its parser (engines and trajectories live in sibling modules)."""
