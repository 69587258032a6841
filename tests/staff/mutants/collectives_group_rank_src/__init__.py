"""Mutant: broadcast treats src as a rank within the group instead of a global rank."""
