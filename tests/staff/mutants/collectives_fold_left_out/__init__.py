"""Mutant: recursive doubling never folds the extra ranks' tensors in (they still receive the result)."""
