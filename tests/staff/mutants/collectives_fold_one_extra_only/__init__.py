"""Mutant: the fold assumes a single extra rank (N = p + 1): only rank N - 1 folds in (hidden tests catch it)."""
