"""Benchmarks of sglang-backends; run ``python benchmarks/run.py``."""
