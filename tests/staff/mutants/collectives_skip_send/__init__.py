"""Mutant: the last rank skips its first send of the reduce-scatter (a deadlock)."""
