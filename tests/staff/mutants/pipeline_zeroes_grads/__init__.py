"""Mutant: train_step zeroes the stage's grads itself, so gradient accumulation is lost."""
