"""Mutant: ZeRO stage 2 memory computed as stage 1 (gradients left replicated)."""
