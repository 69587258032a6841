"""Mutant: Sequence parallelism assumed to save nothing beyond tensor parallelism."""
