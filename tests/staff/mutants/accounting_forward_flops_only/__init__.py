"""Mutant: Training FLOPs counted as 2ND (the forward pass only)."""
