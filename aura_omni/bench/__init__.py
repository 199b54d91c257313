"""Benchmarks against a running server (`aura-omni bench serve`); the in-process ones live in benchmarks/."""
