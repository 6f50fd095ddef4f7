"""The controller's logic, steps 1 and 6 of a training step: which questions each step rolls out, the run's
cursor (which steps are open, which side finished them, when the next may start), and the stall watchdog (how long
nothing moved, and what the run waits for)."""
