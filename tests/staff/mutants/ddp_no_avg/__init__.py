"""Mutant: all_reduce_gradients sums the gradients but never divides by the world size."""
