"""`mgrpo compare`: the methods of docs/method.md §Training schedule run side by side with the same seeds and
budget, evaluated along the way; the plan (plan.py), the results (results.py) and the figure (plot.py)."""
