"""Mutant: no counts exchange: every rank assumes the others route exactly as it does."""
