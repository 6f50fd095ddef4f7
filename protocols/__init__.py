"""protocols."""
