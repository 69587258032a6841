"""Mutant: FSDP all-gathers every layer's weight at the start of forward ('prefetch it all'),
then again per layer: the full model is materialised at once."""
