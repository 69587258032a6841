"""Mutant: core ranks look for their extra rank at me + (N - p), not me + p (a deadlock unless N = 2**k)."""
