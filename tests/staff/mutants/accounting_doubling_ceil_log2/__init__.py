"""Mutant: recursive doubling modelled as ceil(log2 N) steps: the fold in and out counted as one step."""
