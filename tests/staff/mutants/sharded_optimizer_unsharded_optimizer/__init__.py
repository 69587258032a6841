"""Mutant: Stage 1 that is not sharded: every rank builds the inner optimizer over all parameters,
so every rank keeps the whole optimizer state (the results are still right)."""
