"""Mutant: Stage 2 reduce-scatters the grads but forgets to divide by the world size (sum, not mean)."""
