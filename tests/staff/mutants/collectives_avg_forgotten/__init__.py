"""Mutant: all_reduce(op="avg") sums but never divides."""
