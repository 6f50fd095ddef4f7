"""Command-line entry points: `mgrpo-node` (composition root) and `mgrpo` (tap, bench, tools)."""
