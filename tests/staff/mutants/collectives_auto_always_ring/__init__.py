"""Mutant: the model is computed, but algorithm="auto" always picks the ring."""
