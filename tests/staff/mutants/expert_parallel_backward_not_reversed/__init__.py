"""Mutant: the all-to-all backward reuses the forward splits instead of swapping them."""
