"""Mutant: capacity applied per rank (local tokens, local queue) instead of per expert over the group."""
