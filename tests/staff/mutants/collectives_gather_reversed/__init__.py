"""Mutant: all_gather concatenates in reverse rank order."""
