"""Mutant: DDPBucketed accepts a negative bucket size (it silently acts like 0)."""
