"""Mutant: recursive doubling divides by N after every exchange step instead of once at the end."""
