"""Benchmarks run by `mgrpo bench NAME` / `make bench`."""
