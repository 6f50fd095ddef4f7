"""Small tasks that show the whole system learning in minutes on a CPU."""
