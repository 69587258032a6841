"""Mutant: reduce accumulates into every rank's tensor, not only dst's."""
