"""Mutant: Stage 2 averages every grad with an all-reduce (as DDP does) and then drops the
non-owned ones: right values, but it moves the whole gradient to every rank."""
