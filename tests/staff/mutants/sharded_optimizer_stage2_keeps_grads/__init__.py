"""Mutant: Stage 2 averages the owned grads but leaves every other grad in place: no memory saved."""
