"""Tooling around the science: run status, benchmarks, operation counts."""
