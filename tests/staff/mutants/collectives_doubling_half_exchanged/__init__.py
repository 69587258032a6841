"""Mutant: recursive doubling exchanges (and adds) only the first half of the tensor at each step."""
