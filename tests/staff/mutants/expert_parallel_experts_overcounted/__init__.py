"""Mutant: expert gradients divided by the DP size only, though every EP rank's loss fed them."""
