"""Mutant: reduce_scatter does not check that dim 0 divides by the world size."""
