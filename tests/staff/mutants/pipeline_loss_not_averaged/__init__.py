"""Mutant: microbatch losses are not divided by the number of microbatches (grads m times too big)."""
