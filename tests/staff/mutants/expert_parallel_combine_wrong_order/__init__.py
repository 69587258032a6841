"""Mutant: the combine weights are read token-major while the rows are choice-major."""
