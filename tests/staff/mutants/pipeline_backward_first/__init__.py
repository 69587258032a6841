"""Mutant: 1F1B's steady state runs the backward before the forward of each pair."""
