"""Mutant: all_reduce calls the built-in dist.all_reduce."""
