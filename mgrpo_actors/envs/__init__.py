"""Environments: the offline synthetic deep-research web (world, pages, questions) and dataset loading."""
