"""Mutant: train_step runs GPipe's order when asked for 1F1B (same bubble, m activations held)."""
