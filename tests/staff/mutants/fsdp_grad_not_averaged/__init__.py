"""Mutant: FSDP reduce-scatters the weight grads but does not divide by the world size."""
