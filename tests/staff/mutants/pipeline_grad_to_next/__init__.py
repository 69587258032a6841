"""Mutant: input gradients are sent to the next stage instead of the previous one."""
