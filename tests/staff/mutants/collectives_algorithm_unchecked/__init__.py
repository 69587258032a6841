"""Mutant: an unknown algorithm is not rejected: it silently runs the ring."""
