"""Mutant: all_reduce_gradients_flat reduces the flat buffer but never copies it back into .grad."""
