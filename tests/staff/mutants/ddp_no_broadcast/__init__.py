"""Mutant: the wrappers never broadcast rank 0's weights, so ranks train from different ones."""
