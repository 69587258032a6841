"""Mutant: the load-balancing fraction f sums the counts over experts instead of over choices."""
