"""mgrpo_actors."""
