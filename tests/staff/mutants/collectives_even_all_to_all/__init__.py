"""Mutant: all_to_all assumes every piece has the size of the one it sends."""
